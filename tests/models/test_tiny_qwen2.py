"""The tiny Qwen2 model: deterministic, loadable by transformers and by verl's HFModelConfig, and it generates."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from cleaner.models import TinyQwen2Config, build_tiny_qwen2, validate_model_dir
from cleaner.models.model_dir import MARKER_FILE

pytestmark = pytest.mark.slow  # builds and loads a model with transformers: seconds per test

TOOL_CONVERSATION = [
    {"role": "system", "content": "Solve it with Python."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "```python\nprint(2 + 2)\n```"},
    {"role": "tool", "content": "4"},
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen2(tmp_path_factory.mktemp("models") / "tiny", seed=0)


def weights_digest(path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_builds_a_valid_two_layer_qwen2(tiny):
    assert validate_model_dir(tiny) == tiny
    config = json.loads((tiny / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["num_hidden_layers"] == TinyQwen2Config().num_hidden_layers == 2
    assert config["eos_token_id"] == 151645


def test_same_seed_same_weights_reuse_and_rebuild(tiny, tmp_path):
    before = (tiny / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_qwen2(tiny, seed=0) == tiny
    assert (tiny / "model.safetensors").stat().st_mtime_ns == before  # reused, not rebuilt

    other = build_tiny_qwen2(tmp_path / "other", seed=0)
    assert weights_digest(other) == weights_digest(tiny)
    build_tiny_qwen2(other, seed=1)  # another seed replaces the build in place
    assert json.loads((other / MARKER_FILE).read_text())["seed"] == 1
    assert weights_digest(other) != weights_digest(tiny)


def test_transformers_loads_it_and_it_generates(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tokenizer) == 151665
    assert tokenizer.eos_token_id == 151645 and tokenizer.pad_token_id == 151643

    # The Qwen2.5 template from the GGUF: tool results come back as a user turn wrapped in <tool_response>.
    text = tokenizer.apply_chat_template(TOOL_CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")

    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=5, do_sample=False)
    new_ids = out[0, ids.shape[1] :].tolist()
    assert 1 <= len(new_ids) <= 5
    assert all(0 <= i < len(tokenizer) for i in new_ids)
    assert isinstance(tokenizer.decode(new_ids), str)


def test_verl_hf_model_config_accepts_it(tiny):
    from verl.workers.config import HFModelConfig

    config = HFModelConfig(path=str(tiny))
    assert config.architectures == ["Qwen2ForCausalLM"]
    assert config.hf_config.num_hidden_layers == 2
    assert config.tokenizer.eos_token_id == 151645
    assert "<tool_response>" in config.tokenizer.chat_template
    assert config.share_embeddings_and_output_weights is False
