"""GGUF → transformers conversion: hash check, failure leaves no cache entry, and the real 0.5B when it is cached."""

from __future__ import annotations

import pytest

from cleaner.models import GGUFHashMismatch, convert_gguf, ensure_hf_model, validate_model_dir
from cleaner.models.hf_from_gguf import converted_dir_name
from cleaner.models.model_assets import QWEN25_CODER_05B, default_cache_dir


def test_a_gguf_with_the_wrong_hash_is_refused(tmp_path):
    """A cached demo GGUF of the right size but altered content: one-line error, nothing converted."""
    gguf = tmp_path / "models" / QWEN25_CODER_05B.filename
    gguf.parent.mkdir()
    with open(gguf, "wb") as handle:  # sparse: full size, no disk
        handle.truncate(QWEN25_CODER_05B.size)
    with pytest.raises(GGUFHashMismatch) as info:
        ensure_hf_model(cache_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert str(gguf) in message and QWEN25_CODER_05B.sha256 in message and "delete it and re-run" in message
    assert not (tmp_path / "hf-models").exists() or not any((tmp_path / "hf-models").iterdir())


def test_a_failed_conversion_leaves_no_cache_entry(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    out = tmp_path / "hf"
    with pytest.raises(ValueError, match="unsupported GGUF version 0"):
        convert_gguf(bad, out / "broken")
    assert not out.exists() or list(out.iterdir()) == []


def test_missing_gguf(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF model file not found"):
        ensure_hf_model(cache_dir=tmp_path, gguf=tmp_path / "none.gguf")


def _demo_conversion_available() -> bool:
    cache = default_cache_dir()
    converted = cache / "hf-models" / converted_dir_name(QWEN25_CODER_05B.filename, QWEN25_CODER_05B.sha256)
    return converted.is_dir() or (cache / "models" / QWEN25_CODER_05B.filename).is_file()


@pytest.mark.real_model
@pytest.mark.skipif(not _demo_conversion_available(), reason="the demo GGUF is not in the local cache (`make demo`)")
def test_real_qwen25_coder_conversion(monkeypatch):
    """The converted 0.5B (≈50 s the first time, then cached) completes code like the real model does."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.workers.config import HFModelConfig

    path = ensure_hf_model()

    def not_again(*args, **kwargs):
        raise AssertionError("the cached conversion was not reused")

    # cached: the second call neither reads the GGUF nor converts it
    monkeypatch.setattr("cleaner.models.hf_from_gguf.verified_demo_gguf", not_again)
    monkeypatch.setattr("cleaner.models.hf_from_gguf.convert_gguf", not_again)
    assert ensure_hf_model() == path
    monkeypatch.undo()
    validate_model_dir(path)

    config = HFModelConfig(path=str(path))
    assert config.architectures == ["Qwen2ForCausalLM"]
    assert config.hf_config.num_hidden_layers == 24

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert len(tokenizer) == 151665 and tokenizer.eos_token_id == 151645
    messages = [{"role": "user", "content": "Write a Python function add(a, b) that returns a + b. Only code."}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    reply = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "def add(a, b)" in reply and "return a + b" in reply
