"""Read the key/value metadata of a GGUF file (v2/v3) without loading its tensors.

Only what the rollout needs: the chat template and the special token ids, to build a Hugging Face
tokenizer that matches the model llama.cpp serves.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(handle: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise ValueError("GGUF metadata ends early: truncated file")
    return struct.unpack(fmt, data)[0]


def _read_string(handle: BinaryIO) -> str:
    length = _read(handle, "<Q")
    return handle.read(length).decode("utf-8", errors="replace")


def _read_value(handle: BinaryIO, value_type: int, keep: bool) -> Any:
    if value_type in _SCALARS:
        return _read(handle, _SCALARS[value_type])
    if value_type == _STRING:
        return _read_string(handle)
    if value_type == _ARRAY:
        item_type, count = _read(handle, "<I"), _read(handle, "<Q")
        if not keep and item_type in _SCALARS:
            handle.seek(count * struct.calcsize(_SCALARS[item_type]), 1)
            return None
        items = [_read_value(handle, item_type, keep) for _ in range(count)]
        return items if keep else None
    raise ValueError(f"unknown GGUF value type {value_type}")


def read_metadata(path: Path, skip_arrays: bool = True) -> dict[str, Any]:
    """All metadata keys; array values (the vocabulary, merges) are None unless `skip_arrays=False`."""
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = _read(handle, "<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {version}")
        handle.seek(8, 1)  # tensor count: the tensors are not read
        kv_count = _read(handle, "<Q")
        metadata = {}
        for _ in range(kv_count):
            key = _read_string(handle)
            metadata[key] = _read_value(handle, _read(handle, "<I"), keep=not skip_arrays)
        return metadata
