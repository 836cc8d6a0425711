"""`cleaner eval score|lcb-export|lcb-score`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from cleaner.data.cli import input_errors_exit_1
from cleaner.data.rows import read_rows, write_jsonl
from cleaner.evaluation.generations import Sample, load_samples
from cleaner.evaluation.livecodebench import (
    attach_question_ids,
    custom_evaluation_records,
    question_ids_by_ground_truth,
)
from cleaner.evaluation.report import results_table, summarize, write_results


def register(subparsers: argparse._SubParsersAction) -> None:
    evaluation = subparsers.add_parser("eval", help="score evaluation generations")
    commands = evaluation.add_subparsers(dest="eval_command", required=True)

    score = commands.add_parser("score", help="pass@k / maj@n / SAAR table from generation dumps")
    _add_generations(score)
    score.add_argument("--output-dir", type=Path, required=True, help="results.json and results.csv go here")
    _add_run_info(score)
    score.set_defaults(func=run_score)

    export = commands.add_parser("lcb-export", help="LiveCodeBench custom-evaluation JSON (question_id + code_list)")
    _add_generations(export)
    export.add_argument("--dataset", type=Path, required=True, help="the prepared LiveCodeBench parquet")
    export.add_argument("--output", type=Path, required=True, help="JSON file for LiveCodeBench's custom evaluator")
    export.set_defaults(func=run_lcb_export)

    lcb = commands.add_parser("lcb-score", help="run LiveCodeBench programs on code-judge against the hidden tests")
    _add_generations(lcb)
    lcb.add_argument("--dataset", type=Path, required=True, help="the prepared LiveCodeBench parquet")
    lcb.add_argument("--judge-url", default="http://127.0.0.1:8088")
    lcb.add_argument("--output-dir", type=Path, required=True)
    _add_run_info(lcb)
    lcb.set_defaults(func=run_lcb_score)


def _add_generations(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--generations",
        action="append",
        required=True,
        metavar="[NAME=]PATH",
        help="a verl validation dump (dir or .jsonl) or `cleaner rollout` JSONL; NAME labels its benchmark "
        "when the records carry no data_source (repeatable)",
    )


def _add_run_info(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", action="append", default=[], metavar="KEY=VALUE", help="run settings kept in results.json"
    )


def _key_value(text: str, what: str) -> tuple[str | None, str]:
    if "=" not in text:
        return None, text
    key, value = text.split("=", 1)
    if not key:
        raise ValueError(f"{what} {text!r}: empty name before '='")
    return key, value


def load_all(specs: list[str], default_label: str | None = None) -> list[Sample]:
    samples = []
    for spec in specs:
        label, path = _key_value(spec, "--generations")
        samples.extend(load_samples(Path(path), label or default_label))
    return samples


def _run_info(args: argparse.Namespace) -> dict[str, object]:
    info: dict[str, object] = {"generations": args.generations}
    for item in args.run:
        key, value = _key_value(item, "--run")
        if key is None:
            raise ValueError(f"--run {item!r} is not KEY=VALUE")
        info[key] = value
    return info


def print_table(table: Table) -> None:
    """Print at the table's natural width: in a log file (80 columns) or a narrow terminal, rich would shrink every
    column to a few characters (`pas…`, `liv…`)."""
    console = Console()
    natural = Measurement.get(console, console.options.update_width(100_000), table).maximum
    Console(width=max(console.width, natural)).print(table)


def _report(samples: list[Sample], out_dir: Path, run: dict[str, object]) -> None:
    results = summarize(samples)
    print_table(results_table(results))
    json_path, csv_path = write_results(results, out_dir, run)
    print(f"wrote {json_path} and {csv_path}")


@input_errors_exit_1
def run_score(args: argparse.Namespace) -> int:
    _report(load_all(args.generations), args.output_dir, _run_info(args))
    return 0


def _lcb_samples(args: argparse.Namespace) -> list[Sample]:
    rows = read_rows(args.dataset)
    sources = sorted({str(row["data_source"]) for row in rows})
    if len(sources) != 1:
        raise ValueError(f"{args.dataset}: expected one LiveCodeBench data_source, found {sources}")
    mapping = question_ids_by_ground_truth(rows)
    return attach_question_ids(load_all(args.generations, sources[0]), mapping)


@input_errors_exit_1
def run_lcb_export(args: argparse.Namespace) -> int:
    records = custom_evaluation_records(_lcb_samples(args))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} questions to {args.output}")
    return 0


@input_errors_exit_1
def run_lcb_score(args: argparse.Namespace) -> int:
    from cleaner.evaluation.lcb_judge import score_samples_sync

    samples = _lcb_samples(args)
    scores = score_samples_sync(samples, args.judge_url)
    judged = [
        # The judge decides correctness; no majority vote over program texts.
        Sample(**{**sample.__dict__, "correct": score.correct, "score": score.passed / score.total, "answer": None})
        for sample, score in zip(samples, scores, strict=True)
    ]
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(
        [
            {"question_id": s.question_id, "problem": s.problem, "passed": c.passed, "total": c.total}
            for s, c in zip(samples, scores)
        ],
        args.output_dir / "lcb_judged.jsonl",
    )
    (args.output_dir / "lcb_custom_output.json").write_text(
        json.dumps(custom_evaluation_records(samples), indent=1) + "\n"
    )
    _report(judged, args.output_dir, {**_run_info(args), "scored_by": args.judge_url})
    return 0
