"""Hugging Face model directories for the trainer, without internet: the demo GGUF converted to transformers
weights, and a tiny random Qwen2 model with the same tokenizer for CI. Does not import verl."""

from .hf_from_gguf import GGUFHashMismatch, convert_gguf, ensure_hf_model
from .model_dir import InvalidModelDir, validate_model_dir
from .tiny_qwen2 import TinyQwen2Config, build_tiny_qwen2

__all__ = [
    "GGUFHashMismatch",
    "InvalidModelDir",
    "TinyQwen2Config",
    "build_tiny_qwen2",
    "convert_gguf",
    "ensure_hf_model",
    "validate_model_dir",
]
