"""Fixtures of the end-to-end trainer tests: the one real GRPO run that the training, evaluation and tracker checks
share (`grpo_run.py`). The tiny model and the code-judge come from tests/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# The scripted backend is imported by module name, in the test process and in every Ray worker.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def grpo_run(tmp_path_factory, tiny_model_dir, judge_url) -> dict:
    from grpo_run import run_scripted_grpo

    return run_scripted_grpo(tmp_path_factory.mktemp("grpo-cpu"), tiny_model_dir, judge_url)
