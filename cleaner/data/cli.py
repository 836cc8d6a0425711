"""`cleaner data prepare|filter`."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cleaner.data.filter import (
    DEFAULT_ATTEMPTS,
    DEFAULT_SUCCESS_RATE_RATIOS,
    FilterResult,
    filter_by_success_rate,
    parse_success_rate_ratios,
    read_stats,
)
from cleaner.data.prepare import BadRowError, PrepareConfig, prepare_rows
from cleaner.data.records import read_rows, write_jsonl, write_parquet

logger = logging.getLogger(__name__)

FILTERED_PARQUET = "filtered_sr.parquet"
FILTERED_STATS = "filtered_sr.stats.jsonl"


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="prepare and filter datasets")
    commands = data.add_subparsers(dest="data_command", required=True)

    prepare = commands.add_parser("prepare", help="published parquet/JSONL -> verl RLHF parquet")
    prepare.add_argument("--input", type=Path, action="append", required=True, help="input file (repeatable; concatenated)")
    prepare.add_argument("--output", type=Path, required=True, help="output .parquet")
    prepare.add_argument("--split", choices=("train", "test"), default="train")
    prepare.add_argument("--no-tool", action="store_true", help="no-tool baseline: no tool hints, single-turn agent")
    prepare.add_argument("--skip-bad", action="store_true", help="drop bad rows and report how many, instead of failing")
    prepare.add_argument("--data-source", help="data_source for rows that have none (eval files without the column)")
    prepare.set_defaults(func=run_prepare)

    filt = commands.add_parser("filter", help="stratified sampling by rollout success rate")
    filt.add_argument("--dataset", type=Path, required=True, help="the dataset the stats were computed on")
    filt.add_argument("--stats", type=Path, required=True, help="stats JSONL: one record per prompt, uid = row index")
    filt.add_argument("--output-dir", type=Path, required=True, help=f"where {FILTERED_PARQUET} is written")
    filt.add_argument(
        "--success_rate_ratios",
        "--success-rate-ratios",
        dest="ratios",
        default=DEFAULT_SUCCESS_RATE_RATIOS,
        help="'rate:ratio,...' or one bare ratio per bucket 0..attempts (default: %(default)s)",
    )
    filt.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS, help="rollouts per prompt in the stats")
    filt.set_defaults(func=run_filter)


def run_prepare(args: argparse.Namespace) -> int:
    config = PrepareConfig(split=args.split, use_tools=not args.no_tool, skip_bad=args.skip_bad, data_source=args.data_source)
    rows = [row for path in args.input for row in read_rows(path)]
    try:
        result = prepare_rows(rows, config, total=len(rows))
    except BadRowError as error:
        logger.error("%s (use --skip-bad to drop such rows)", error)
        return 1
    write_parquet(result.rows, args.output)
    print(f"wrote {len(result.rows)} rows to {args.output}; skipped {len(result.skipped)} bad rows")
    return 0


def run_filter(args: argparse.Namespace) -> int:
    ratios = parse_success_rate_ratios(args.ratios, args.attempts)
    rows = read_rows(args.dataset)
    stats = read_stats(args.stats, args.attempts)
    result = filter_by_success_rate(rows, stats, ratios, args.attempts)
    write_parquet(result.rows, args.output_dir / FILTERED_PARQUET)
    write_jsonl(result.stats, args.output_dir / FILTERED_STATS)
    Console().print(bucket_table(result))
    print(f"kept {len(result.rows)} of {len(rows)} rows -> {args.output_dir / FILTERED_PARQUET}")
    return 0


def bucket_table(result: FilterResult) -> Table:
    table = Table(title="kept per success-rate bucket")
    for column in ("bucket", "ratio", "non-code kept/total", "code kept/total", "kept"):
        table.add_column(column, justify="right")
    for bucket in range(result.attempts + 1):
        non_code = result.non_code.get(bucket)
        code = result.code.get(bucket)
        kept = (non_code.kept if non_code else 0) + (code.kept if code else 0)
        table.add_row(
            f"{bucket}/{result.attempts}",
            f"{result.ratios[bucket]:g}",
            f"{non_code.kept}/{non_code.total}" if non_code else "0/0",
            f"{code.kept}/{code.total}" if code else "0/0",
            str(kept),
        )
    return table
