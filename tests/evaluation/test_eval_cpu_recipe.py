"""The evaluation scripts' platform switch (PLATFORM=cpu) and the validation-only run's training batch.

The verl command lines come from PRINT_COMMAND=1 (one argument per line, a blank line after each run);
tests/e2e/test_eval_cpu_e2e.py scores a real validation pass of the CPU training recipe (same overrides, same dump).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "recipe" / "cleaner" / "eval"
EVAL_CPU = ROOT / "dataset" / "eval-cpu"


def run_script(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(EVAL / script), "trainer.device=cpu_from_user"],
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "MODEL_PATH": str(tmp_path / "model"),
            "DATA_DIR": str(EVAL_CPU),
            "OUTPUT_ROOT": str(tmp_path / "out"),
            "PRINT_COMMAND": "1",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    assert result.returncode == 0, result.stderr
    return [block.splitlines()[3:] for block in result.stdout.split("\n\n") if block.strip()]


def test_cpu_platform_runs_each_benchmark_on_the_cpu_backend_and_leaves_no_ray_dir(tmp_path):
    before = set(glob.glob("/tmp/cleaner-ray-*"))
    runs = commands(
        run_script("eval_aime_gpqa.sh", tmp_path, PLATFORM="cpu", BENCHMARKS="aime2024 gpqa-diamond", VAL_N="2")
    )
    assert len(runs) == 2
    for args, benchmark in zip(runs, ("aime2024", "gpqa-diamond")):
        assert f"data.val_files=['{EVAL_CPU}/{benchmark}.parquet']" in args
        assert "trainer.val_only=True" in args and "actor_rollout_ref.rollout.val_kwargs.n=2" in args
        assert "actor_rollout_ref.rollout.name=cpu" in args
        assert "actor_rollout_ref.rollout.checkpoint_engine.backend=naive" in args
        assert "trainer.use_v1=False" in args and "+ray_kwargs.ray_init.num_cpus=2" in args
        # The user's overrides come last, so they win over the platform's.
        assert args.index("trainer.device=cpu") < args.index("trainer.device=cpu_from_user") == len(args) - 1
        [temp_dir] = [a.split("=", 1)[1] for a in args if a.startswith("+ray_kwargs.ray_init._temp_dir=")]
        assert temp_dir.startswith("/tmp/cleaner-ray-")
    new_dirs = set(glob.glob("/tmp/cleaner-ray-*")) - before
    assert not new_dirs & {a.split("=", 1)[1] for run in runs for a in run if "_temp_dir=" in a}


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_a_benchmark_smaller_than_a_training_batch_still_runs(tmp_path, platform):
    """verl stops a run whose train set (here the benchmark itself) is smaller than one training batch."""
    [args] = commands(run_script("eval_livecodebench.sh", tmp_path, PLATFORM=platform))
    batch = int(next(a for a in args if a.startswith("data.train_batch_size=")).split("=", 1)[1])
    mini_batch = int(
        next(a for a in args if a.startswith("actor_rollout_ref.actor.ppo_mini_batch_size=")).split("=")[1]
    )
    assert 1 <= mini_batch <= batch <= 2  # the bundled set has 2 problems; AIME has 30


def test_gpu_is_the_default_platform(tmp_path):
    [args] = commands(run_script("eval_livecodebench.sh", tmp_path))
    assert "trainer.device=cpu" not in args and "actor_rollout_ref.rollout.name=sglang" in args


def test_an_unknown_platform_is_refused_by_name(tmp_path):
    result = run_script("eval_livecodebench.sh", tmp_path, PLATFORM="tpu")
    assert result.returncode == 2 and "PLATFORM must be gpu or cpu, not 'tpu'" in result.stderr


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_the_overlong_buffer_fits_in_the_responses(tmp_path, platform):
    """verl's DAPO reward manager fails at start-up when the overlong buffer is longer than the responses."""
    [args] = commands(run_script("eval_livecodebench.sh", tmp_path, PLATFORM=platform))
    value = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args}
    assert int(value["+reward.reward_kwargs.overlong_buffer_cfg.len"]) <= int(value["data.max_response_length"])


def _run_in_own_session(tmp_path: Path, script: str, **env: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Run a script in a session of its own; return its result and the pids still running in that session."""
    process = subprocess.Popen(
        ["bash", str(EVAL / script)],
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "PLATFORM": "cpu",
            "DATA_DIR": str(tmp_path / "no-data"),
            "OUTPUT_DIR": str(tmp_path / "out"),
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stdout, stderr = process.communicate(timeout=240)
    running = []  # exited processes (state Z) wait for a reaper that need not be prompt; they run nothing
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else None
        except OSError:
            continue
        if fields and int(fields[3]) == process.pid and fields[0] != "Z":
            running.append(int(entry.name))
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), running


@pytest.mark.slow
def test_a_directory_that_is_not_a_model_stops_the_cpu_run_before_anything_starts(tmp_path):
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    result, left = _run_in_own_session(tmp_path, "eval_livecodebench.sh", MODEL_PATH=str(not_a_model))
    assert result.returncode == 1 and str(not_a_model) in result.stderr, result.stderr
    assert not (tmp_path / "out" / "judge.log").exists()  # no judge was started
    assert left == []


@pytest.mark.slow
@pytest.mark.judge
def test_a_failed_cpu_run_stops_the_judge_it_started(tmp_path):
    from cleaner.models.tiny_qwen2 import build_tiny_qwen2

    model = build_tiny_qwen2(tmp_path / "tiny")
    result, left = _run_in_own_session(tmp_path, "eval_livecodebench.sh", MODEL_PATH=str(model))
    assert result.returncode == 1
    assert f"data: {tmp_path / 'no-data'}/livecodebench-v6.parquet does not exist" in result.stderr, result.stderr
    assert (tmp_path / "out" / "judge.log").exists()  # the script's own judge answered, then was stopped
    assert "judge:" not in result.stderr
    assert left == []


@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_the_evaluated_weights_are_model_path_not_a_checkpoint_in_the_output_dir(tmp_path, platform):
    """verl's default resume mode (auto) loads the latest checkpoint under trainer.default_local_dir before the
    validation pass: with OUTPUT_DIR set to a training run's directory it would evaluate that step instead."""
    [args] = commands(run_script("eval_livecodebench.sh", tmp_path, PLATFORM=platform))
    resume = [a for a in args if a.startswith("trainer.resume_mode=")]
    assert resume == ["trainer.resume_mode=disable"]
