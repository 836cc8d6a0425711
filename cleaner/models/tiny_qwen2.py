"""A tiny randomly initialised Qwen2 model with the real Qwen2.5 tokenizer: the trainer's code path in seconds.

Same architecture class, tokenizer, chat template and special ids as the converted Qwen2.5-Coder-0.5B, so
everything around the model (prompt rendering, masks, verl's `HFModelConfig`, FSDP wrapping, checkpoints)
runs exactly as with the real one; only the weights are meaningless. The vocabulary equals the tokenizer's
length, so any sampled id decodes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from cleaner.models.model_assets import QWEN25_CODER_05B, assemble
from cleaner.models.qwen25_tokenizer import QWEN25_EOS_ID, QWEN25_VOCAB_SIZE, write_qwen25_tokenizer

from .model_dir import publish_dir, reusable

logger = logging.getLogger(__name__)

_PAD_ID = 151_643  # <|endoftext|>, as in Qwen2.5


@dataclass(frozen=True)
class TinyQwen2Config:
    """The shape of the tiny model: about 19.5 M parameters (almost all in the untied embedding and lm_head)."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096


def _build(out_dir: Path, seed: int, shape: TinyQwen2Config, cache_dir: Path | None) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # The Qwen2.5 tokenizer needs only the demo GGUF's metadata (its chat template), not its weights.
    write_qwen25_tokenizer(assemble(cache_dir=cache_dir), out_dir)
    config = Qwen2Config(
        vocab_size=QWEN25_VOCAB_SIZE,
        tie_word_embeddings=False,  # as in the converted 0.5B, so both exercise the same weight layout
        bos_token_id=_PAD_ID,
        eos_token_id=QWEN25_EOS_ID,
        pad_token_id=_PAD_ID,
        architectures=["Qwen2ForCausalLM"],
        dtype="float32",
        **asdict(shape),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = QWEN25_EOS_ID
    model.generation_config.pad_token_id = _PAD_ID
    model.save_pretrained(out_dir)


def build_tiny_qwen2(
    out_dir: str | os.PathLike,
    seed: int = 0,
    shape: TinyQwen2Config = TinyQwen2Config(),
    cache_dir: Path | None = None,
) -> Path:
    """Write the tiny model (weights from `seed`, so the same seed gives the same weights) into `out_dir` and return
    it; returns at once if `out_dir` already holds this exact build. `cache_dir` is where the demo GGUF is assembled."""
    out_dir = Path(out_dir)
    marker = {
        "kind": "tiny-qwen2",
        "seed": seed,
        "shape": asdict(shape),
        "tokenizer_gguf_sha256": QWEN25_CODER_05B.sha256,
    }
    if reusable(out_dir, marker):
        logger.info("using the existing tiny model %s", out_dir)
        return out_dir
    publish_dir(out_dir, lambda tmp: _build(tmp, seed, shape, cache_dir), marker)
    logger.info("built the tiny Qwen2 model (seed %d) in %s", seed, out_dir)
    return out_dir
