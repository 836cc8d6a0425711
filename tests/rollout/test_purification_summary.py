"""`cleaner rollout`'s summary and `benchmarks/purification.py --from` print the purification table."""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
from pathlib import Path

from cleaner.rollout.cli import print_purification
from support.purification_records import paired_groups

ROOT = Path(__file__).resolve().parents[2]


def printed(records: list[dict]) -> str:
    from rich.console import Console

    out = io.StringIO()
    print_purification(Console(file=out, width=200), records)
    return out.getvalue()


def test_rollout_summary_prints_the_modes_of_its_groups():
    text = printed([r for r in paired_groups(4) if not r["saar"]])
    for mode in ("none", "error_turn_mask", "void_turn_filter", "error_trajectory_filter", "roc"):
        assert mode in text
    row = next(line for line in text.splitlines() if "reinforced-error" in line)
    assert row.split("│")[2].strip() == "25.0%"  # the reinforced-error share of none, its interval and n below
    assert "saar: no SAAR-on records" in text


def test_rollout_summary_without_turns_prints_nothing():
    records = [{k: v for k, v in r.items() if k != "purify_turns"} for r in paired_groups(4)]
    assert printed(records) == ""


def purification_benchmark():
    """benchmarks/purification.py as a module (benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("purification_benchmark", ROOT / "benchmarks" / "purification.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    return benchmark


def test_benchmark_recomputes_the_table_from_its_cache(tmp_path, capsys):
    records = paired_groups(4)
    for saar in (True, False):
        text = "".join(json.dumps(r) + "\n" for r in records if r["saar"] == saar)
        if saar:  # the committed records are gzipped
            (tmp_path / "rollout-saar-on.jsonl.gz").write_bytes(gzip.compress(text.encode()))
        else:
            (tmp_path / "rollout-saar-off.jsonl").write_text(text)
    run = {
        "date": "2026-01-01T00:00:00+00:00",
        "demo_args": ["-n", "4"],
        "wall_s": 10.0,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [2.0, 2.0, 2.0],
        "passes": [{"saar": True, "exit_code": 0, "wall_s": 9.0, "model_cpu_s": 5.0}],
    }
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    families = {"p0": "written-to-fail", "p1": "other", "p2": "other", "p3": "other"}
    (tmp_path / "problems.jsonl").write_text(
        "".join(json.dumps({"extra_info": {"problem_id": p, "family": f}}) + "\n" for p, f in families.items())
    )
    assert purification_benchmark().main(["--from", str(tmp_path), "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "32 trajectories" in out
    modes = ["none", "saar", "saar_negative_samples", "error_turn_mask", "void_turn_filter"]
    modes += ["error_trajectory_filter", "roc"]
    rows = [line.split("`")[1] for line in out.splitlines() if line.startswith("| `")]
    assert rows[: 2 * len(modes)] == modes + modes  # the failed-call table, then the training table
    assert rows[2 * len(modes) :] == ["other", "written-to-fail"]
    assert "SAAR on 9 s wall / 5 s llama.cpp CPU (exit 0)" in out
    # The paired comparison: SAAR removed the kept failed call of sample 0 (16 pairs: 4 at −1, 12 at 0; t(15) = 2.13).
    assert "| tool errors kept / trajectory | 0.00 | 0.25 | -0.25 [-0.49, -0.01] |" in out


def test_the_committed_records_give_the_table_over_the_whole_problem_set():
    """benchmarks/README.md's table comes from the records in benchmarks/data/purification-rollouts/: they must still
    load and hold what the table claims: every problem of the set in complete groups of both modes, and a RoC row
    matched to SAAR's generated tokens; the runs that wrote them name paths any clone can read."""
    from cleaner.analysis.purification_table import purification_table
    from cleaner.data.rows import read_rows

    data = ROOT / "benchmarks" / "data"
    records, runs, families = purification_benchmark().read_cache(data / "purification-rollouts")
    problem_ids = {str(row["extra_info"]["problem_id"]) for row in read_rows(data / "purification_problems.jsonl")}
    table = purification_table(records, resamples=20, families=families)
    assert set(families) == problem_ids
    assert {row.setting.name: row.prompts for row in table.rows} == dict.fromkeys(
        ["none", "saar", "saar_negative_samples", "error_turn_mask", "void_turn_filter",
         "error_trajectory_filter", "roc"], len(problem_ids)
    )  # fmt: skip
    assert table.group_size >= 4 and table.roc_matched is True
    assert sum(family.prompts for family in table.families) == len(problem_ids)
    assert runs and all(not run["demo_args"][run["demo_args"].index("--problems") + 1].startswith("/") for run in runs)
