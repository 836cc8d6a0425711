"""Train and validation parquet files for the CPU training run, from the bundled demo problems.

The bundled problems (`cleaner/resources/demo_problems.jsonl`, package data) are already verl RLHF rows with
`agent_name=cleaner_tool_agent`; they are copied with the data package's reader and parquet writer. The
recipe's preflight then checks them like any training file (columns, the agent loop every row selects).
Usage: `python -m cleaner.data.demo_train_files OUT_DIR [--val-count N]` prints the two paths.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cleaner.data.rows import read_rows, write_parquet
from cleaner.resources import DEMO_PROBLEMS, resource_path


def write_demo_train_files(out_dir: Path, val_count: int) -> tuple[Path, Path]:
    """All bundled problems as the train file, the first `val_count` of them as the validation file."""
    source = resource_path(DEMO_PROBLEMS)
    rows = read_rows(source)
    if not 0 < val_count <= len(rows):
        raise ValueError(f"--val-count must be between 1 and {len(rows)}, got {val_count}")
    out_dir.mkdir(parents=True, exist_ok=True)
    train, val = out_dir / "train.parquet", out_dir / "val.parquet"
    write_parquet(rows, train)
    write_parquet(rows[:val_count], val)
    return train, val


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cleaner.data.demo_train_files", description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--val-count", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        paths = write_demo_train_files(args.out_dir, args.val_count)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(*paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
