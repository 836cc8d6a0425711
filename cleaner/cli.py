"""The `cleaner` command. Each sub-command lives with the module it drives and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# (sub-command, module exposing `register(subparsers)`; the parser it adds sets `func(args) -> int`)
SUBCOMMANDS = (
    ("data", "cleaner.data.cli"),
    ("eval", "cleaner.evaluation.cli"),
    ("rollout", "cleaner.rollout.cli"),
    ("report", "cleaner.report.cli"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cleaner", description=__doc__)
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ...)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for _name, module in SUBCOMMANDS:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
