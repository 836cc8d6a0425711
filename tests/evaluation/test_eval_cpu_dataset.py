"""The bundled CPU evaluation sets (dataset/eval-cpu) are what `cleaner data prepare` writes from their sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cleaner.data.prepare import PrepareConfig, prepare_rows
from cleaner.data.rows import read_rows
from cleaner.evaluation.livecodebench import hidden_tests, question_ids_by_ground_truth

EVAL_CPU = Path(__file__).resolve().parents[2] / "dataset" / "eval-cpu"
BENCHMARKS = ("aime2024", "gpqa-diamond", "livecodebench-v6")


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_each_bundled_set_is_its_source_prepared(benchmark):
    source = read_rows(EVAL_CPU / "source" / f"{benchmark}.jsonl")
    bundled = read_rows(EVAL_CPU / f"{benchmark}.parquet")
    assert bundled == prepare_rows(source, PrepareConfig(split="test")).rows
    assert len(bundled) >= 2 and len({json.dumps(row["prompt"]) for row in bundled}) == len(bundled)


def test_the_livecodebench_set_maps_each_trajectory_to_its_question_and_has_both_test_kinds():
    rows = read_rows(EVAL_CPU / "livecodebench-v6.parquet")
    assert sorted(question_ids_by_ground_truth(rows).values()) == sorted(
        row["extra_info"]["question_id"] for row in rows
    )
    fn_names = {hidden_tests(row["reward_model"]["ground_truth"])[1] for row in rows}
    assert None in fn_names and len(fn_names) == 2  # a stdin problem and a call-based one
