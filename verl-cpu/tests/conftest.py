"""Fixtures of the verl-cpu tests: the tiny random Qwen2 model (real Qwen2.5 tokenizer), built once per session.

The model comes from the repository's builder (`cleaner.models.tiny_qwen2`, which reads the tokenizer out of the
demo GGUF): a test-only dependency; the package itself imports nothing of it.
"""

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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from cleaner.models.tiny_qwen2 import build_tiny_qwen2

    return build_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2") / "model")


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
