"""The evaluation scripts' platform switch (PLATFORM=cpu), their DRY_RUN, and the validation-only run's settings.

The verl command lines are recorded by a stand-in interpreter (`PYTHON`): `-m verl.trainer.main_ppo` writes its
arguments (and the Ray temp dir cpu_process.sh hands it) to a file, every other module runs for real.
tests/e2e/test_eval_cpu_e2e.py scores a real validation pass of the CPU training recipe (same overrides, same dump).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cleaner.verl.trainer_config import compose_trainer_config

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT / "recipe" / "cleaner" / "eval"
CONFIGS = ROOT / "recipe" / "cleaner" / "config"
EVAL_CPU = ROOT / "dataset" / "eval-cpu"

pytestmark = pytest.mark.slow  # runs the evaluation scripts: seconds each (their DRY_RUN imports verl)
RECORDER = """#!/usr/bin/env bash
if [[ "$1 $2" == "-m verl.trainer.main_ppo" ]]; then
    {{ printf '%s\\n' "${{@:3}}" "ray_tmp=${{CLEANER_RAY_TMP:-}}"; echo; }} >>"{record}"
    exit 0
fi
exec "{python}" "$@"
"""


def run_script(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    record = tmp_path / "runs.txt"
    recorder = tmp_path / "python"
    recorder.write_text(RECORDER.format(record=record, python=sys.executable))
    recorder.chmod(0o755)
    result = subprocess.run(
        ["bash", str(EVAL / script), "trainer.device=cpu_from_user"],
        env={
            **os.environ,
            "PYTHON": str(recorder),
            "MODEL_PATH": str(tmp_path / "model"),
            "DATA_DIR": str(EVAL_CPU),
            "OUTPUT_ROOT": str(tmp_path / "out"),
            "DRY_RUN": "1",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    result.runs = record.read_text() if record.exists() else ""
    return result


def commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    """The argument lists of the main_ppo runs, each ending with `ray_tmp=<CLEANER_RAY_TMP>`."""
    assert result.returncode == 0, result.stderr
    return [block.splitlines() for block in result.runs.split("\n\n") if block.strip()]


def test_cpu_platform_runs_each_benchmark_on_the_cpu_overlay_and_leaves_no_ray_dir(tmp_path):
    before = set(glob.glob("/tmp/cleaner-ray-*"))
    runs = commands(
        run_script("eval_aime_gpqa.sh", tmp_path, PLATFORM="cpu", BENCHMARKS="aime2024 gpqa-diamond", VAL_N="2")
    )
    assert len(runs) == 2
    for args, benchmark in zip(runs, ("aime2024", "gpqa-diamond")):
        assert args[:4] == ["--config-dir", str(ROOT / "recipe" / "cleaner" / "config"), "--config-name", "eval_tools"]
        assert f"data.val_files=['{EVAL_CPU}/{benchmark}.parquet']" in args
        assert "+platform=cpu" in args and "actor_rollout_ref.rollout.val_kwargs.n=2" in args
        # The user's overrides come last, so they win over the platform's.
        assert args[-2] == "trainer.device=cpu_from_user"
        assert args[-1].startswith("ray_tmp=/tmp/cleaner-ray-")
    new_dirs = set(glob.glob("/tmp/cleaner-ray-*")) - before
    assert not new_dirs & {run[-1].split("=", 1)[1] for run in runs}
    assert runs[0][-1] != runs[1][-1]  # a Ray temp dir of its own for each run


def test_a_dry_run_makes_no_generations_and_scores_none(tmp_path):
    """DRY_RUN=1 on make eval-cpu's script composes every run and stops: nothing to export or score."""
    result = run_script("eval_cpu.sh", tmp_path)
    assert len(commands(result)) == 6  # 2 settings x (aime2024 + gpqa-diamond, livecodebench-v6)
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow  # composes verl's config
@pytest.mark.parametrize("platform", [[], ["+platform=cpu"]])
def test_a_benchmark_smaller_than_a_training_batch_still_runs(platform):
    """verl stops a run whose train set (here the benchmark itself) is smaller than one training batch."""
    config = compose_trainer_config([*platform, "actor_rollout_ref.model.path=/m"], "eval_tools", CONFIGS)
    assert 1 <= config.actor_rollout_ref.actor.ppo_mini_batch_size <= config.data.train_batch_size <= 2
    # verl's DAPO reward manager fails at start-up when the overlong buffer is longer than the responses.
    assert config.reward.reward_kwargs.overlong_buffer_cfg.len <= config.data.max_response_length
    # MODEL_PATH is evaluated: verl's default resume mode would load a checkpoint in the output dir instead.
    assert config.trainer.resume_mode == "disable"


def test_gpu_is_the_default_platform(tmp_path):
    [args] = commands(run_script("eval_livecodebench.sh", tmp_path))
    assert "+platform=cpu" not in args and args[-1] == "ray_tmp="


def test_an_unknown_platform_is_refused_by_name(tmp_path):
    result = run_script("eval_livecodebench.sh", tmp_path, PLATFORM="tpu")
    assert result.returncode == 2 and "PLATFORM must be gpu or cpu, not 'tpu'" in result.stderr


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
