"""train_cpu.sh hands CHAT_TEMPLATE's text to verl as custom_chat_template, one line that renders the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cleaner.resources import PYTHON_BLOCK_ECHO_CHAT_TEMPLATE, resource_path

ROOT = Path(__file__).resolve().parents[2]
TRAIN_CPU = ROOT / "dataset" / "train-cpu"

pytestmark = pytest.mark.slow  # each test runs train_cpu.sh's DRY_RUN, which composes verl's config: tens of seconds


def dry_run_model_config(tmp_path: Path, **env: str) -> dict:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    full_env = {
        **os.environ,
        "PYTHON": sys.executable,
        "DRY_RUN": "1",
        "MODEL_PATH": str(model),
        "TRAIN_FILES": str(TRAIN_CPU / "train.parquet"),
        "VAL_FILES": str(TRAIN_CPU / "val.parquet"),
        "OUTPUT_DIR": str(tmp_path / "out"),
        **env,
    }
    result = subprocess.run(
        ["bash", str(ROOT / "recipe" / "cleaner" / "train_cpu.sh")], env=full_env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    config_text = result.stdout.split("--- composed config ---\n", 1)[1].rsplit("DRY_RUN ok", 1)[0]
    return yaml.safe_load(config_text)["actor_rollout_ref"]["model"]


def test_the_template_file_becomes_custom_chat_template_on_one_line(tmp_path):
    template = resource_path(PYTHON_BLOCK_ECHO_CHAT_TEMPLATE)
    model = dry_run_model_config(tmp_path, CHAT_TEMPLATE=str(template))
    # tests/rollout/test_echo_chat_template.py: this one-line text renders exactly as the file.
    assert model["custom_chat_template"] == template.read_text(encoding="utf-8").rstrip("\n").replace("\n", " ")


def test_without_a_template_the_models_own_is_used(tmp_path):
    assert dry_run_model_config(tmp_path)["custom_chat_template"] is None
