"""The train/validation parquet pair that the CPU runs' data writers produce, and those writers' CLI ending."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cleaner.data.rows import write_parquet


def write_train_val(rows: list[dict[str, Any]], out_dir: Path, val_count: int) -> tuple[Path, Path]:
    """`train.parquet` (every row) and `val.parquet` (the first `val_count` rows) in `out_dir`."""
    if not 0 < val_count <= len(rows):
        raise ValueError(f"val_count must be between 1 and {len(rows)}, got {val_count}")
    out_dir.mkdir(parents=True, exist_ok=True)
    train, val = out_dir / "train.parquet", out_dir / "val.parquet"
    write_parquet(rows, train)
    write_parquet(rows[:val_count], val)
    return train, val


def print_paths(write: Callable[[], tuple[Path, Path]]) -> int:
    """Run a writer for its CLI: the two paths on one line of stdout (exit 0), or `error: ...` on stderr (exit 1)."""
    try:
        paths = write()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(*paths)
    return 0
