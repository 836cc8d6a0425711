"""Reading and writing row files: parquet (the published format) and JSONL (the synthetic samples)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a .parquet or .jsonl file as plain Python dicts (numpy arrays become lists)."""
    if not path.is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return [to_plain(row) for row in frame.to_dict(orient="records")]
    if path.suffix == ".jsonl":
        return [record for _, record in iter_jsonl(path)]
    raise ValueError(f"{path}: unsupported file type {path.suffix!r} (expected .parquet or .jsonl)")


def iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """(`path:line`, record) for every non-blank line; the location lets callers name a bad record."""
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_number}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON: {exc}") from exc


def to_plain(value: Any) -> Any:
    """Parquet gives numpy arrays and scalars for nested columns; the rest of the code wants lists/dicts."""
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [to_plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    if not rows:
        raise ValueError(f"refusing to write {path}: no rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def write_jsonl(records: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
