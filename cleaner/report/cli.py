"""`cleaner report`: a static HTML report from rollout JSONL files (or verl validation dumps)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="static HTML report of trajectories: purified vs raw, rollback diffs, plots", description=__doc__
    )
    parser.add_argument("inputs", nargs="+", type=Path, help="`cleaner rollout` JSONL files or verl validation dumps")
    parser.add_argument("-o", "--output", type=Path, required=True, help="HTML file to write")
    parser.add_argument("--max-trajectories", type=int, default=200, help="trajectories rendered in full")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .loading import load_trajectories
    from .page import render_report

    records = load_trajectories(args.inputs)
    page = render_report(records, [str(p) for p in args.inputs], args.max_trajectories)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page, encoding="utf-8")
    logger.info("wrote %s (%d trajectories)", args.output, len(records))
    print(f"report: {args.output}")
    return 0
