"""Test support: run the `cleaner` command in-process, through its real parser (every sub-command registered)."""

from __future__ import annotations

from cleaner.cli import build_parser


def run_cli(*argv: str) -> int:
    """`cleaner <argv>` (e.g. `run_cli("data", "prepare", ...)`): the sub-command's exit code."""
    args = build_parser().parse_args(list(argv))
    return int(args.func(args) or 0)
