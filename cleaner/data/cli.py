"""`cleaner data prepare|filter`."""

from __future__ import annotations

import argparse
import functools
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
from cleaner.data.rows import read_rows, write_jsonl, write_parquet

logger = logging.getLogger(__name__)


def input_errors_exit_1(command):
    """Bad input (a ValueError or a missing file) ends the command with its message and exit code 1."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (ValueError, FileNotFoundError) as error:
            logger.error("%s", error)
            return 1

    return run


FILTERED_PARQUET = "filtered_sr.parquet"
# Where the reference implementation's data_filter.sh reads its stats (next to the 30K parquet).
REFERENCE_STATS_NAME = "Open-AgentRL-30K.filtered.parquet.success.jsonl"
FILTERED_STATS = "filtered_sr.stats.jsonl"
NO_TOOL_SUFFIX = ".notool"
TRAIN_30K = Path("Open-AgentRL-30K") / "Open-AgentRL-30K.parquet"
EVAL_DIR = Path("Open-AgentRL-Eval")
EVAL_BENCHMARKS = ("aime2024", "aime2025", "gpqa-diamond", "livecodebench-v6")


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="prepare and filter datasets")
    commands = data.add_subparsers(dest="data_command", required=True)

    prepare = commands.add_parser("prepare", help="published parquet/JSONL -> verl RLHF parquet")
    prepare.add_argument(
        "--input", type=Path, action="append", required=True, help="input file (repeatable; concatenated)"
    )
    prepare.add_argument("--output", type=Path, required=True, help="output .parquet")
    prepare.add_argument("--split", choices=("train", "test"), default="train")
    prepare.add_argument("--no-tool", action="store_true", help="no-tool baseline: no tool hints, single-turn agent")
    prepare.add_argument(
        "--skip-bad", action="store_true", help="drop bad rows and report how many, instead of failing"
    )
    prepare.add_argument("--data-source", help="data_source for rows that have none (eval files without the column)")
    prepare.set_defaults(func=run_prepare)

    prepare_all = commands.add_parser(
        "prepare-all", help="every published file (dataset/README.md layout) -> NAME.parquet and NAME.notool.parquet"
    )
    prepare_all.add_argument(
        "--raw-dir", type=Path, required=True, help="holds Open-AgentRL-30K/ and Open-AgentRL-Eval/"
    )
    prepare_all.add_argument("--output-dir", type=Path, required=True)
    prepare_all.add_argument("--skip-bad", action="store_true")
    prepare_all.set_defaults(func=run_prepare_all)

    filt = commands.add_parser("filter", help="stratified sampling by rollout success rate")
    filt.add_argument("--dataset", type=Path, required=True, help="the dataset the stats were computed on")
    filt.add_argument(
        "--stats",
        type=Path,
        required=True,
        help=f"stats JSONL: one record per prompt, uid = row index (the reference names it {REFERENCE_STATS_NAME})",
    )
    filt.add_argument(
        "--output-dir", "--output_dir", type=Path, required=True, help=f"where {FILTERED_PARQUET} is written"
    )
    filt.add_argument(
        "--retain-code",
        "--retain_code",
        action="store_true",
        help="keep every code row solved at least once: only the 0/8 bucket's ratio applies to code rows",
    )
    filt.add_argument(
        "--success_rate_ratios",
        "--success-rate-ratios",
        dest="ratios",
        default=DEFAULT_SUCCESS_RATE_RATIOS,
        help="'rate:ratio,...' or one bare ratio per bucket 0..attempts (default: %(default)s)",
    )
    filt.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS, help="rollouts per prompt in the stats")
    filt.add_argument(
        "--prepared-dir",
        type=Path,
        help=f"also write the kept rows prepared for training: {FILTERED_PARQUET} and its no-tool twin",
    )
    filt.set_defaults(func=run_filter)


@input_errors_exit_1
def run_prepare(args: argparse.Namespace) -> int:
    config = PrepareConfig(
        split=args.split, use_tools=not args.no_tool, skip_bad=args.skip_bad, data_source=args.data_source
    )
    rows = [row for path in args.input for row in read_rows(path)]
    return 0 if _prepare_to(rows, config, args.output) else 1


def _prepare_to(rows: list[dict], config: PrepareConfig, output: Path) -> bool:
    try:
        result = prepare_rows(rows, config, total=len(rows))
    except BadRowError as error:
        logger.error("%s (use --skip-bad to drop such rows)", error)
        return False
    write_parquet(result.rows, output)
    print(f"wrote {len(result.rows)} rows to {output}; skipped {len(result.skipped)} bad rows")
    return True


def _prepare_both(rows: list[dict], split: str, skip_bad: bool, output: Path) -> bool:
    """`output` with tool prompts and its `.notool` twin for the no-tool baselines."""
    no_tool = output.with_name(output.stem + NO_TOOL_SUFFIX + output.suffix)
    return all(
        _prepare_to(rows, PrepareConfig(split=split, use_tools=use_tools, skip_bad=skip_bad), path)
        for use_tools, path in ((True, output), (False, no_tool))
    )


def single_parquet(directory: Path) -> Path:
    """The one parquet file of an eval directory (file names differ between releases)."""
    files = sorted(directory.glob("*.parquet"))
    if len(files) != 1:
        raise FileNotFoundError(
            f"expected exactly one .parquet file in {directory}, found {len(files)} (see dataset/README.md)"
        )
    return files[0]


@input_errors_exit_1
def run_prepare_all(args: argparse.Namespace) -> int:
    jobs = [(args.raw_dir / TRAIN_30K, "open-agentrl-30k", "train")]
    jobs += [(single_parquet(args.raw_dir / EVAL_DIR / name), name, "test") for name in EVAL_BENCHMARKS]
    for source, name, split in jobs:
        if not _prepare_both(read_rows(source), split, args.skip_bad, args.output_dir / f"{name}.parquet"):
            return 1
    return 0


@input_errors_exit_1
def run_filter(args: argparse.Namespace) -> int:
    ratios = parse_success_rate_ratios(args.ratios, args.attempts)
    rows = read_rows(args.dataset)
    stats = read_stats(args.stats, args.attempts)
    result = filter_by_success_rate(rows, stats, ratios, args.attempts, retain_code=args.retain_code)
    write_parquet(result.rows, args.output_dir / FILTERED_PARQUET)
    write_jsonl(result.stats, args.output_dir / FILTERED_STATS)
    Console().print(bucket_table(result))
    print(f"kept {len(result.rows)} of {len(rows)} rows -> {args.output_dir / FILTERED_PARQUET}")
    if args.prepared_dir is not None and not _prepare_both(
        result.rows, "train", False, args.prepared_dir / FILTERED_PARQUET
    ):
        return 1
    return 0


def bucket_table(result: FilterResult) -> Table:
    title = "kept per success-rate bucket" + (
        " (--retain-code: code rows filtered at 0/8 only)" if result.retain_code else ""
    )
    table = Table(title=title)
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
