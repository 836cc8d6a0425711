"""`python -m cleaner.models {convert,tiny,check}`: build or check a model directory for the trainer; prints its path."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .hf_from_gguf import ensure_hf_model
from .model_dir import validate_model_dir
from .tiny_qwen2 import build_tiny_qwen2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cleaner.models", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser(
        "convert", help="convert a Qwen2/2.5 GGUF (default: the demo 0.5B) to a transformers dir"
    )
    convert.add_argument("--gguf", type=Path, help="a Qwen2/2.5 GGUF file (default: the demo model, SHA-256-checked)")
    convert.add_argument("--out", type=Path, help="model directory to write (default: the SHA-keyed cache entry)")
    convert.add_argument("--cache-dir", type=Path, help="cache root (default: $CLEANER_CACHE_DIR or ~/.cache/cleaner)")
    tiny = commands.add_parser("tiny", help="build the tiny random Qwen2 model with the Qwen2.5 tokenizer")
    tiny.add_argument("--out", type=Path, required=True, help="model directory to write")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--cache-dir", type=Path, help="where the demo GGUF (for its chat template) is assembled")
    check = commands.add_parser("check", help="exit 1 with the reason if DIR is not a usable model directory")
    check.add_argument("path", type=Path)
    return parser


def _run(args: argparse.Namespace) -> Path:
    if args.command == "tiny":
        return build_tiny_qwen2(args.out, seed=args.seed, cache_dir=args.cache_dir)
    if args.command == "check":
        return validate_model_dir(args.path)
    return ensure_hf_model(cache_dir=args.cache_dir, gguf=args.gguf, out_dir=args.out)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        path = _run(args)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
