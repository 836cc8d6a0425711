"""cpu_smoke.sh hands CHAT_TEMPLATE's text to verl as one Hydra value that parses back to the file's template."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

from cleaner.resources import PYTHON_BLOCK_ECHO_CHAT_TEMPLATE, resource_path

ROOT = Path(__file__).resolve().parents[2]
KEY = "actor_rollout_ref.model.custom_chat_template"


def printed_command(tmp_path: Path, **env: str) -> list[str]:
    full_env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PRINT_COMMAND": "1",
        "MODEL_PATH": str(tmp_path / "model"),
        "TRAIN_FILES": str(tmp_path / "train.parquet"),
        "OUTPUT_DIR": str(tmp_path / "out"),
        **env,
    }
    result = subprocess.run(
        ["bash", str(ROOT / "recipe" / "cleaner" / "cpu_smoke.sh")], env=full_env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_template_file_becomes_one_override_with_its_text(tmp_path):
    template = resource_path(PYTHON_BLOCK_ECHO_CHAT_TEMPLATE)
    lines = printed_command(tmp_path, CHAT_TEMPLATE=str(template))
    (override,) = [line for line in lines if line.startswith(f"{KEY}=")]
    value = OverridesParser.create().parse_override(override).value()
    assert value == template.read_text(encoding="utf-8").rstrip("\n").replace("\n", " ")


def test_without_a_template_the_models_own_is_used(tmp_path):
    lines = printed_command(tmp_path)
    assert not any(line.startswith(f"{KEY}=") for line in lines)
