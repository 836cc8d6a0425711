"""validate_model_dir's one-line errors, and publish_dir's promise: no half-built directory ever looks valid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from cleaner.models import InvalidModelDir, validate_model_dir
from cleaner.models.model_dir import MARKER_FILE, publish_dir, reusable

MARKER = {"kind": "test", "version": 1}


def write_minimal_model(path: Path) -> Path:
    """The smallest directory validate_model_dir accepts (not loadable as a real model, which is not its job)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
    save_file({"w": torch.zeros(4, 4)}, str(path / "model.safetensors"))
    (path / "tokenizer.json").write_text("{}")
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return path


@pytest.fixture
def model(tmp_path) -> Path:
    return write_minimal_model(tmp_path / "model")


def assert_one_line_error(path: Path, problem: str) -> None:
    with pytest.raises(InvalidModelDir) as info:
        validate_model_dir(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert problem in message


def test_accepts_a_complete_directory(model):
    assert validate_model_dir(str(model)) == model


def test_missing_directory_and_file(tmp_path):
    assert_one_line_error(tmp_path / "nope", "does not exist")
    (tmp_path / "file").write_text("x")
    assert_one_line_error(tmp_path / "file", "is a file")


@pytest.mark.parametrize(
    "remove, problem",
    [
        ("config.json", "config.json is missing"),
        ("model.safetensors", "no weights"),
        ("tokenizer_config.json", "tokenizer_config.json is missing"),
        ("tokenizer.json", "tokenizer files are missing"),
    ],
)
def test_missing_file(model, remove, problem):
    (model / remove).unlink()
    assert_one_line_error(model, problem)


def test_config_problems(model):
    (model / "config.json").write_text("{not json")
    assert_one_line_error(model, "config.json is not readable JSON")
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert_one_line_error(model, "exactly one architecture")
    (model / "config.json").write_text(json.dumps({"architectures": ["A", "B"], "model_type": "qwen2"}))
    assert_one_line_error(model, "exactly one architecture")


def test_truncated_weights(model):
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert_one_line_error(model, "model.safetensors is truncated or corrupt")


def test_sharded_weights_with_a_missing_shard(model):
    (model / "model.safetensors").rename(model / "model-00001-of-00002.safetensors")
    weight_map = {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert_one_line_error(model, "weight shard model-00002-of-00002.safetensors is missing")


def test_no_chat_template(model):
    (model / "tokenizer_config.json").write_text(json.dumps({}))
    assert_one_line_error(model, "no chat template")
    (model / "chat_template.jinja").write_text("{{ messages }}")
    validate_model_dir(model)


def test_publish_then_reuse(tmp_path):
    target = tmp_path / "out"
    assert not reusable(target, MARKER)
    assert publish_dir(target, write_minimal_model, MARKER) == target
    assert reusable(target, MARKER)
    assert not reusable(target, {**MARKER, "version": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_failed_build_leaves_nothing(tmp_path):
    def build(path: Path) -> None:
        write_minimal_model(path)
        raise RuntimeError("conversion crashed")

    with pytest.raises(RuntimeError, match="conversion crashed"):
        publish_dir(tmp_path / "out", build, MARKER)
    assert list(tmp_path.iterdir()) == []


def test_invalid_build_is_not_published(tmp_path):
    with pytest.raises(InvalidModelDir, match="config.json is missing"):
        publish_dir(tmp_path / "out", lambda path: None, MARKER)
    assert list(tmp_path.iterdir()) == []


def test_rebuild_replaces_an_outdated_build(tmp_path):
    target = publish_dir(tmp_path / "out", write_minimal_model, MARKER)
    (target / "stale-extra-file").write_text("x")
    publish_dir(target, write_minimal_model, {**MARKER, "version": 2})
    assert json.loads((target / MARKER_FILE).read_text())["version"] == 2
    assert not (target / "stale-extra-file").exists()


def test_refuses_to_overwrite_a_directory_it_did_not_build(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not built by cleaner.models"):
        publish_dir(foreign, write_minimal_model, MARKER)
    assert (foreign / "notes.txt").read_text() == "keep me"


@pytest.mark.slow  # builds a model in a subprocess it kills
def test_killed_build_leaves_no_valid_looking_dir_and_is_cleaned_up(tmp_path):
    """SIGKILL in the middle of a build: the target never appears; the next build removes the dead temp dir."""
    target = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_model_dir import MARKER, write_minimal_model
        from cleaner.models.model_dir import publish_dir

        def build(path):
            write_minimal_model(path)
            print("written", flush=True)
            time.sleep(60)

        publish_dir(Path({str(target)!r}), build, MARKER)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "written"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert leftovers == [f".out.{proc.pid}.tmp"]
    assert not target.exists()

    publish_dir(target, write_minimal_model, MARKER)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_keeps_the_temp_dir_of_a_live_concurrent_build(tmp_path):
    live = tmp_path / f".out.{os.getppid()}.tmp"
    live.mkdir()
    publish_dir(tmp_path / "out", write_minimal_model, MARKER)
    assert live.is_dir()
