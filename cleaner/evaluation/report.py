"""Per-benchmark results table (pass@k, maj@n, SAAR metrics) and its JSON/CSV files."""

from __future__ import annotations

import csv
import json
import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.table import Table

from cleaner.evaluation.generations import Sample
from cleaner.evaluation.pass_at_k import majority_correct, pass_at_k, report_ks
from cleaner.saar.aggregate import summarize_saar

logger = logging.getLogger(__name__)

# The SAAR columns of the printed table (the JSON and CSV files keep every statistic of SaarSummary.table()).
PRINTED_SAAR = (
    "saar_rollbacks_triggered",
    "saar_recovery_rate",
    "saar_tool_errors_kept_per_traj",
    "saar_spliced_token_fraction",
)


@dataclass(frozen=True)
class BenchmarkResult:
    benchmark: str
    problems: int
    samples: int  # trajectories in total
    n: int  # samples per problem (the smallest, if they differ)
    pass_at: dict[str, float]  # "pass@k" -> mean over problems of the unbiased estimate
    maj_at_n: float | None  # None when the records carry no extracted answer at all (judge-scored programs)
    mean_score: float
    saar: dict[str, float | None]  # cleaner.saar.aggregate statistics of the samples' saar_* fields

    def flat(self) -> dict[str, object]:
        row: dict[str, object] = {
            "benchmark": self.benchmark,
            "problems": self.problems,
            "samples": self.samples,
            "n": self.n,
            **self.pass_at,
            f"maj@{self.n}": self.maj_at_n,
            "mean_score": self.mean_score,
        }
        row.update(self.saar)
        return row


def summarize(samples: list[Sample]) -> list[BenchmarkResult]:
    by_benchmark: dict[str, dict[str, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        by_benchmark[sample.benchmark][sample.problem].append(sample)
    return [_summarize_one(name, problems) for name, problems in sorted(by_benchmark.items())]


def _summarize_one(name: str, problems: dict[str, list[Sample]]) -> BenchmarkResult:
    sizes = {len(group) for group in problems.values()}
    n = min(sizes)
    if len(sizes) > 1:
        logger.warning("%s: problems have %s samples each; pass@k is reported up to k=%d", name, sorted(sizes), n)
    pass_at = {
        f"pass@{k}": _mean([pass_at_k(len(group), sum(s.correct for s in group), k) for group in problems.values()])
        for k in report_ks(n)
    }
    groups = list(problems.values())
    # An empty `pred` is a sample without an answer, which votes for nothing; no `pred` at all means no vote.
    has_answers = any(s.answer is not None for group in groups for s in group)
    maj = (
        _mean([majority_correct([s.answer for s in g], [s.correct for s in g]) for g in groups])
        if has_answers
        else None
    )
    flat = [s for group in groups for s in group]
    saar = summarize_saar([s.saar for s in flat])
    return BenchmarkResult(
        benchmark=name,
        problems=len(groups),
        samples=len(flat),
        n=n,
        pass_at=pass_at,
        maj_at_n=maj,
        mean_score=_mean([s.score for s in flat]),
        saar={} if saar is None else saar.table(),
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def results_table(results: list[BenchmarkResult]) -> Table:
    rows = [result.flat() for result in results]
    columns = [
        key
        for key in dict.fromkeys(key for row in rows for key in row)
        if not key.startswith("saar_") or key in PRINTED_SAAR
    ]
    table = Table(title="evaluation")
    for column in columns:
        table.add_column(column, justify="left" if column == "benchmark" else "right")
    for row in rows:
        table.add_row(*(_cell(column, row.get(column)) for column in columns))
    return table


def _cell(column: str, value: object) -> str:
    if value is None:
        return "-"
    if column.startswith(("pass@", "maj@")):
        return f"{100 * float(value):.1f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def write_results(results: list[BenchmarkResult], out_dir: Path, run: dict[str, object]) -> tuple[Path, Path]:
    """`results.json` (with the run's settings) and `results.csv` (one row per benchmark)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / "results.json", out_dir / "results.csv"
    json_path.write_text(json.dumps({"run": run, "benchmarks": [asdict(r) for r in results]}, indent=2) + "\n")
    rows = [result.flat() for result in results]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return json_path, csv_path
