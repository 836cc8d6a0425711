"""Fixtures of the verl-cpu tests: a tiny random Qwen2 model with a byte-level tokenizer (`tiny_model.py`), built
once per session from nothing but this package's dependencies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from verl_cpu.server import CpuGenerationServer

HERE = Path(__file__).resolve().parent
# Helpers shared by the test modules are imported by module name.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from server_fixtures import ModelConfig, RolloutConfig  # noqa: E402
from tiny_model import build_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2") / "model")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def make_server(tiny_model_dir, tokenizer, monkeypatch):
    """`make_server(**config)`: a server over the tiny model, not yet launched (`RolloutConfig` takes the keywords)."""
    # The server converts verl's model DictConfig; these tests hand it the dataclass-like object directly.
    monkeypatch.setattr("verl.utils.config.omega_conf_to_dataclass", lambda config, dataclass_type=None: config)

    def make(**config) -> CpuGenerationServer:
        return CpuGenerationServer(
            RolloutConfig(**config), ModelConfig(tiny_model_dir, tokenizer), replica_rank=0, max_batch_size=8
        )

    return make
