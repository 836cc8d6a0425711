"""One real training step of recipe/cleaner/train_cpu.sh on the scripted problems, for the CPU-trainer tests.

The tiny model is the actor and the scripted rollout backend (`cpu_scripted_backend.py`) samples; the tests
that use it add their own environment and Hydra overrides and read back verl's metrics and the batch a hook
of theirs pickled to `work/batch.pkl`."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 540  # a quiet 2-core machine needs about 2 minutes; shared CI runners can be several times slower
STOP_GRACE_S = 60  # the recipe's exit trap stops the trainer, its Ray cluster and the judge
TEST_TIMEOUT_S = RUN_TIMEOUT_S + STOP_GRACE_S + 60


def run_recipe(args: list[str], env: dict[str, str], log_path: Path) -> int:
    """Run train_cpu.sh; on timeout send it SIGTERM, so that its exit trap stops everything it started."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            return process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            pytest.fail(f"the training run took more than {RUN_TIMEOUT_S} s; log: {log_path}")


def train_one_scripted_step(
    work: Path,
    model_dir: Path,
    judge_url: str,
    rollout_n: int,
    dump_env: str,
    extra_env: dict[str, str],
    overrides: list[str],
) -> dict:
    """Train one step on the scripted problems; returns the run's dir, metrics per step, dumped batch and log.

    `dump_env` names the variable through which the test's hook learns where to pickle the batch; `extra_env` is
    added to the run's environment (train_cpu.sh reads only paths, the judge and RAY_NUM_CPUS from it); the test's
    Hydra `overrides` come after the ones here, so they win."""
    from cpu_scripted_backend import BACKEND_NAME, PROBLEMS

    from cleaner.data.rows import read_rows, write_parquet
    from cleaner.resources import DEMO_PROBLEMS, resource_path

    rows = [
        row for row in read_rows(resource_path(DEMO_PROBLEMS)) if any(p.marker in str(row["prompt"]) for p in PROBLEMS)
    ]
    assert len(rows) == len(PROBLEMS)
    write_parquet(rows, work / "train.parquet")
    env = {
        **os.environ,
        "MODEL_PATH": str(model_dir),
        "OUTPUT_DIR": str(work / "out"),
        "JUDGE_URL": judge_url,
        "TRAIN_FILES": str(work / "train.parquet"),
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "VERL_USE_EXTERNAL_MODULES": "verl_cpu.plugin,cpu_scripted_backend",
        dump_env: str(work / "batch.pkl"),
        **extra_env,
    }
    log_path = work / "run.log"
    args = [
        str(ROOT / "recipe/cleaner/train_cpu.sh"),
        "trainer.val_before_train=False",
        # max_prompt_length + max_response_length, and 4 x that for the reference's log-probs
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=768",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=3072",
        f"actor_rollout_ref.rollout.name={BACKEND_NAME}",
        f"actor_rollout_ref.rollout.n={rollout_n}",
        f"data.train_batch_size={len(PROBLEMS)}",
        "trainer.total_training_steps=1",
        # The scripted trajectories are ~200 prompt and ~100 response tokens: small tensors, small micro-batches.
        "data.max_prompt_length=384",
        "data.max_response_length=384",
        "trainer.test_freq=-1",  # no validation pass: the step is what is under test
        *overrides,
    ]
    returncode = run_recipe(args, env, log_path)
    log = log_path.read_text(errors="replace")
    assert returncode == 0, log[-6000:]
    steps = [json.loads(line) for line in (work / "out/metrics.jsonl").read_text().splitlines()]
    with open(work / "batch.pkl", "rb") as handle:
        batch = pickle.load(handle)
    return {"dir": work / "out", "metrics": {s["step"]: s["data"] for s in steps}, "batch": batch, "log": log}
