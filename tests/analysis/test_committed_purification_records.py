"""The purification run committed in benchmarks/data/purification-rollouts/ is what benchmarks/README.md's table
comes from (`benchmarks/purification.py --from ...`): it must still load and hold the comparison the table claims,
every problem of the set in complete groups of both modes, and a RoC row matched to SAAR's generated tokens."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from cleaner.analysis.purification_table import purification_table
from cleaner.data.rows import read_rows

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "benchmarks" / "data" / "purification-rollouts"
PROBLEM_SET = ROOT / "benchmarks" / "data" / "purification_problems.jsonl"


def benchmark_module():
    spec = importlib.util.spec_from_file_location("purification_benchmark", ROOT / "benchmarks" / "purification.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_committed_records_give_the_table_over_the_whole_problem_set():
    records, runs, families = benchmark_module().read_cache(RECORDS)
    table = purification_table(records, resamples=20, families=families)
    problems = len(read_rows(PROBLEM_SET))
    assert set(families) == {str(row["extra_info"]["problem_id"]) for row in read_rows(PROBLEM_SET)}
    assert {row.setting.name: row.prompts for row in table.rows} == dict.fromkeys(
        ["none", "saar", "saar_negative_samples", "error_turn_mask", "void_turn_filter",
         "error_trajectory_filter", "roc"], problems
    )  # fmt: skip
    assert table.group_size >= 4 and table.roc_matched is True
    assert sum(family.prompts for family in table.families) == problems
    assert runs and all(not run["demo_args"][run["demo_args"].index("--problems") + 1].startswith("/") for run in runs)
