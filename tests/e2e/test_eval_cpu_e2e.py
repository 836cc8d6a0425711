"""The evaluation pipeline end to end on a real verl validation pass: the validation pass of the shared GRPO run
(`grpo_run.py`: verl's real trainer on CPU with test-time SAAR and the generation dump on), then `cleaner eval
score` on verl's own dump, as the evaluation recipe does after its validation-only run.

Generations come from the scripted backend (`cpu_scripted_backend.py`): each trajectory's first code cell fails,
test-time SAAR retries it and the fix succeeds, then the final answer is right for one of a problem's two samples
and wrong for the other. The run's IS gate (`rollback_is_threshold`) scores each splice: per problem one trajectory
gets a purified response (the failure rolled back) and the other keeps its failure (appended). The tool runs on a
real code-judge and the reward is CLEANER's. Checked: the dump holds one record per trajectory with the reward's
acc/pred and every scalar saar_* field (verl handed the agent loop's statistics to the reward during validation and
dumped what it returned), the n samples of a problem group together, the dumped responses are the purified or the
appended ones as the gate decided, and the results `cleaner eval score` writes equal pass@k, maj@n and the SAAR
columns computed here from the dump.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter, defaultdict

import pytest
from cpu_scripted_backend import PROBLEMS
from grpo_run import BENCHMARK, VAL_N
from scripted_training import ROOT, TEST_TIMEOUT_S

VALIDATION_STEP = 1  # the pass after the (only) training step
# Failed calls the model caused (judge and infrastructure failures are counted apart).
MODEL_ERRORS = ("exception", "syntax_error", "timeout", "memory_limit", "nonzero_exit", "bad_call")

pytestmark = [pytest.mark.slow, pytest.mark.judge, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture(scope="module")
def run(grpo_run, tmp_path_factory):
    records = [
        json.loads(line) for line in (grpo_run["validation"] / f"{VALIDATION_STEP}.jsonl").read_text().splitlines()
    ]
    out = tmp_path_factory.mktemp("eval-score")
    scored = subprocess.run(
        [sys.executable, "-m", "cleaner.cli", "eval", "score", "--generations", f"{BENCHMARK}={grpo_run['validation']}",
         "--output-dir", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-3000:]
    return {
        "records": records,
        "results": json.loads((out / "results.json").read_text()),
        "table": scored.stdout + scored.stderr,
    }


def _problem_of(record: dict):
    return next(p for p in PROBLEMS if p.marker in record["input"])


def _groups(records: list[dict]) -> dict[str, list[dict]]:
    """The samples of each problem (verl's legacy trainer dumps no uid: one prompt text per problem)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[record["input"]].append(record)
    return groups


def test_the_dump_holds_every_trajectory_with_the_reward_and_saar_fields(run):
    from cleaner.saar.stats import SCALAR_EXTRA_FIELD_KEYS

    records = run["records"]
    assert len(records) == len(PROBLEMS) * VAL_N
    for record in records:
        problem = _problem_of(record)
        assert record["step"] == VALIDATION_STEP and record["gts"] == problem.answer
        assert {"acc", "pred", "score"} <= record.keys()
        assert record["score"] == (1.0 if record["acc"] else -1.0)
        assert set(SCALAR_EXTRA_FIELD_KEYS) <= record.keys(), sorted(set(SCALAR_EXTRA_FIELD_KEYS) - record.keys())
        # Test-time SAAR acted: one failing position retried and recovered.
        assert record["saar_rollback_enabled"] == 1
        assert record["saar_rollbacks_triggered"] == record["saar_rollbacks_recovered"] == 1
        assert record["saar_tool_calls"] == 2 and problem.fixed in record["output"]
        if record["saar_planb_replaces"] == 1:  # purified: the failure is cut from the response
            assert record["saar_planb_appends"] == 0 and record["saar_purified_errors"] == 1
            assert problem.failing not in record["output"] and problem.error_name not in record["output"]
        else:  # appended: the failed call and its error stay, as without SAAR
            assert record["saar_planb_appends"] == 1 and record["saar_purified_errors"] == 0
            assert problem.failing in record["output"] and problem.error_name in record["output"]


def test_the_n_samples_of_a_problem_group_together(run):
    groups = _groups(run["records"])
    assert len(groups) == len(PROBLEMS)
    for group in groups.values():
        assert len(group) == VAL_N
        assert len({_problem_of(record).marker for record in group}) == 1
        # The scripted final answers alternate per problem: one right, one wrong.
        assert sorted(bool(record["acc"]) for record in group) == [False, True]
        # Validation samples with top_p 0.6, so the gate's behaviour side is a second prompt-log-prob prefill of
        # the error context, not the processed sampled log-probs; the scripted backend's prompt log-probs do not
        # depend on the context, so every splice scores log IS 0 and is replaced (one scale on both sides).
        assert [record["saar_planb_replaces"] for record in group] == [1, 1]


def _pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _majority(group: list[dict]) -> float:
    votes = Counter(record["pred"] for record in group if record["pred"])
    if not votes:
        return 0.0
    top = max(votes.values())
    leaders = [answer for answer, count in votes.items() if count == top]
    right = {record["pred"] for record in group if record["acc"]}
    return sum(answer in right for answer in leaders) / len(leaders)


def test_the_scored_results_are_the_numbers_of_the_dump(run):
    records = run["records"]
    groups = _groups(records)
    expected_pass = {
        f"pass@{k}": sum(_pass_at_k(VAL_N, sum(bool(r["acc"]) for r in g), k) for g in groups.values()) / len(groups)
        for k in (1, 2)
    }
    triggered = sum(r["saar_rollbacks_triggered"] for r in records)
    recovered = sum(r["saar_rollbacks_recovered"] for r in records)
    kept_errors = sum(sum(r[f"saar_fail_{c}"] for c in MODEL_ERRORS) - r["saar_purified_errors"] for r in records)

    [result] = run["results"]["benchmarks"]
    assert result["benchmark"] == BENCHMARK
    assert (result["problems"], result["samples"], result["n"]) == (len(PROBLEMS), len(records), VAL_N)
    assert result["pass_at"] == pytest.approx(expected_pass)
    assert result["pass_at"] == pytest.approx({"pass@1": 0.5, "pass@2": 1.0})
    assert result["maj_at_n"] == pytest.approx(sum(_majority(g) for g in groups.values()) / len(groups))
    assert result["saar"]["saar_trajectories"] == len(records)
    assert result["saar"]["saar_rollbacks_triggered"] == triggered == len(records)
    assert result["saar"]["saar_recovery_rate"] == pytest.approx(recovered / triggered) == 1.0
    # every splice replaced: no failed call is kept
    assert result["saar"]["saar_tool_errors_kept_per_traj"] == pytest.approx(kept_errors / len(records)) == 0.0
    # The printed table names the benchmark and the SAAR columns.
    assert BENCHMARK in run["table"] and "saar_rollbacks_triggered" in run["table"]
    assert "pass@2" in run["table"] and "maj@2" in run["table"]
