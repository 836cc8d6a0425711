"""The evaluation recipe end to end: recipe/cleaner/eval/eval_aime_gpqa.sh with PLATFORM=cpu runs one verl
validation-only `main_ppo` (trainer.val_only=True) and then `cleaner eval score` on verl's own dump.

The tiny random Qwen2 model is loaded by the trainer worker; generations come from the scripted backend
(`cpu_scripted_backend.py`, as in the training e2e test): each trajectory's first code cell fails, test-time
SAAR retries it, the fix succeeds and the failure is rolled back, then the final answer is right for one of a
problem's two samples and wrong for the other. The tool runs on a real code-judge and the reward is CLEANER's.
Checked: the dump holds one record per trajectory with the reward's acc/pred and every scalar saar_* field
(verl handed the agent loop's statistics to the reward during validation and dumped what it returned), the
n samples of a problem group together, the dumped responses are the purified ones, and the results the recipe
wrote equal pass@k, maj@n and the SAAR columns computed here from the dump.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict

import pytest
from cpu_scripted_backend import BACKEND_NAME, PROBLEMS
from scripted_training import HERE, ROOT, TEST_TIMEOUT_S, run_recipe

VAL_N = 2
BENCHMARK = "demo-math"
CPU_PLUGIN = "verl_cpu.plugin"
# Failed calls the model caused (judge and infrastructure failures are counted apart).
MODEL_ERRORS = ("exception", "syntax_error", "timeout", "memory_limit", "nonzero_exit", "bad_call")

pytestmark = [pytest.mark.slow, pytest.mark.judge, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, judge_url):
    from cleaner.data.rows import read_rows, write_parquet
    from cleaner.resources import DEMO_PROBLEMS, resource_path

    work = tmp_path_factory.mktemp("eval-cpu")
    rows = [
        row for row in read_rows(resource_path(DEMO_PROBLEMS)) if any(p.marker in str(row["prompt"]) for p in PROBLEMS)
    ]
    assert len(rows) == len(PROBLEMS)
    write_parquet(rows, work / "data" / f"{BENCHMARK}.parquet")
    env = {
        **os.environ,
        "PLATFORM": "cpu",
        "MODEL_PATH": str(tiny_model_dir),
        "DATA_DIR": str(work / "data"),
        "BENCHMARKS": BENCHMARK,
        "VAL_N": str(VAL_N),
        "TEST_TIME_SAAR": "on",
        "OUTPUT_DIR": str(work / "out"),
        "JUDGE_URL": judge_url,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "VERL_USE_EXTERNAL_MODULES": f"{CPU_PLUGIN},cpu_scripted_backend",
        # TransferQueue's controller and storage unit hold a logical CPU each for the whole run.
        "RAY_NUM_CPUS": "4",
        "OMP_NUM_THREADS": "2",
    }
    log_path = work / "run.log"
    args = [
        str(ROOT / "recipe/cleaner/eval/eval_aime_gpqa.sh"),
        f"actor_rollout_ref.rollout.name={BACKEND_NAME}",
        # The trainer the GPU recipes run (verl's default): its dump keys each trajectory <prompt>_<session>_<index>.
        "trainer.use_v1=True",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]
    returncode = run_recipe(args, env, log_path)
    log = log_path.read_text(errors="replace")
    assert returncode == 0, log[-6000:]
    dump = work / "out" / "generations" / BENCHMARK / "0.jsonl"
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    results = json.loads((work / "out" / "results.json").read_text())
    return {"records": records, "results": results, "log": log}


def _problem_of(record: dict):
    return next(p for p in PROBLEMS if p.marker in record["input"])


def test_the_dump_holds_every_trajectory_with_the_reward_and_saar_fields(run):
    from cleaner.saar.stats import SCALAR_EXTRA_FIELD_KEYS

    records = run["records"]
    assert len(records) == len(PROBLEMS) * VAL_N
    for record in records:
        problem = _problem_of(record)
        assert record["step"] == 0 and record["gts"] == problem.answer
        assert {"acc", "pred", "score"} <= record.keys()
        assert record["score"] == (1.0 if record["acc"] else -1.0)
        assert set(SCALAR_EXTRA_FIELD_KEYS) <= record.keys(), sorted(set(SCALAR_EXTRA_FIELD_KEYS) - record.keys())
        # Test-time SAAR acted: one failing position retried and recovered, the failure cut from the response.
        assert record["saar_rollback_enabled"] == 1
        assert record["saar_rollbacks_triggered"] == record["saar_rollbacks_recovered"] == 1
        assert record["saar_tool_calls"] == 2 and record["saar_purified_errors"] == 1
        assert problem.fixed in record["output"]
        assert problem.failing not in record["output"] and problem.error_name not in record["output"]


def test_the_n_samples_of_a_problem_group_together(run):
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in run["records"]:
        prompt, session, index = record["uid"].rsplit("_", 2)
        assert index == "0"  # one output per trajectory
        groups[prompt].append(record)
    assert len(groups) == len(PROBLEMS)
    assert all(len({record["input"] for record in group}) == 1 for group in groups.values())
    for group in groups.values():
        assert len(group) == VAL_N
        assert len({_problem_of(record).marker for record in group}) == 1
        # The scripted final answers alternate per problem: one right, one wrong.
        assert sorted(bool(record["acc"]) for record in group) == [False, True]


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


def test_the_recipes_results_are_the_numbers_of_the_dump(run):
    records = run["records"]
    groups: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        groups[record["uid"].rsplit("_", 2)[0]].append(record)
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
    assert result["saar"]["saar_tool_errors_kept_per_traj"] == pytest.approx(kept_errors / len(records)) == 0.0
    assert run["results"]["run"]["test_time_saar"] == "on" and run["results"]["run"]["n"] == str(VAL_N)
    # The printed table names the benchmark and the SAAR columns.
    assert "saar_rollbacks_triggered" in run["log"] and "pass@2" in run["log"] and "maj@2" in run["log"]
