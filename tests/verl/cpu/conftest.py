"""Fixtures of the CPU-trainer tests: the tiny random Qwen2 model (real Qwen2.5 tokenizer), built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# The scripted backend is imported by module name, in the test process and in every Ray worker.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from cleaner.models.tiny_qwen2 import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2") / "model")
