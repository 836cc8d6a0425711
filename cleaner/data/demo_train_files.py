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

from cleaner.data.rows import read_rows
from cleaner.data.train_val import print_paths, write_train_val
from cleaner.resources import DEMO_PROBLEMS, resource_path


def write_demo_train_files(out_dir: Path, val_count: int) -> tuple[Path, Path]:
    """All bundled problems as the train file, the first `val_count` of them as the validation file."""
    return write_train_val(read_rows(resource_path(DEMO_PROBLEMS)), out_dir, val_count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cleaner.data.demo_train_files", description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--val-count", type=int, default=2)
    args = parser.parse_args(argv)
    return print_paths(lambda: write_demo_train_files(args.out_dir, args.val_count))


if __name__ == "__main__":
    sys.exit(main())
