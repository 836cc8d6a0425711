"""Fixtures shared across the suite: the real Qwen3 tokenizer, the tiny Qwen2 model and a real code-judge service."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Tests that use these fixtures belong to a slow tier (markers registered in pyproject.toml).
FIXTURE_TIERS = {"judge_url": "judge", "gguf": "real_model"}


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, marker in FIXTURE_TIERS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    from cleaner.models.qwen3_tokenizer import load_qwen3_tokenizer

    return load_qwen3_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny random Qwen2 model (real Qwen2.5 tokenizer) that the CPU trainer runs train, built once."""
    from cleaner.models.tiny_qwen2 import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2") / "model")


@pytest.fixture(scope="session")
def judge_url(tmp_path_factory) -> str:
    """A real `code-judge serve` (embedded redis-server, sandbox on) on a loopback port, for the whole session."""
    from code_judge.local import local_judge

    with local_judge(tmp_path_factory.mktemp("judge") / "judge.log") as url:
        yield url
