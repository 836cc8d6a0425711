"""The recipe shell scripts outside verl: preflight checks, data preparation and filtering, shellcheck."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cleaner.names import AGENT_NAME

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipe" / "cleaner"
SAMPLES = ROOT / "dataset" / "samples"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"


def shell_scripts() -> list[Path]:
    return sorted(
        [*RECIPES.glob("*.sh"), *RECIPES.glob("eval/*.sh"), ROOT / "data_filter.sh", *ROOT.glob("docker/*.sh")]
    )


@pytest.mark.slow
def test_shellcheck_is_clean():
    result = subprocess.run(
        [str(SHELLCHECK), "-x", *map(str, shell_scripts())], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(script), *args], env=full_env, capture_output=True, text=True, timeout=280)


@pytest.mark.slow  # imports verl's trainer
def test_the_trainer_start_check_names_everything_that_is_missing(tmp_path):
    """A real start (no DRY_RUN): main_ppo's driver stops at its config check, before Ray, naming each input."""
    result = run(
        RECIPES / "qwen3_4b_cleaner.sh",
        {
            "MODEL_DIR": str(tmp_path / "models"),
            "DATA_DIR": str(tmp_path / "data"),
            "JUDGE_URL": "http://127.0.0.1:9",
            "OUTPUT_ROOT": str(tmp_path / "out"),
        },
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    start = lines.index("cleaner.verl.config_checks.TrainerConfigError: cannot start:")
    assert f"model: {tmp_path / 'models' / 'Qwen3-4B-RA-SFT'} has no config.json" in lines[start + 1]
    assert [line.split()[1] for line in lines[start + 2 : start + 5]] == [
        str(tmp_path / "data" / name) for name in ("open-agentrl-30k.parquet", "aime2024.parquet", "aime2025.parquet")
    ]
    assert lines[start + 5].startswith("judge: no answer from http://127.0.0.1:9/ping")
    assert "ray init" not in result.stdout + result.stderr
    assert not (tmp_path / "out" / "Qwen3-4B-CLEANER").exists()


def preflight_inputs(tmp_path: Path, train_agent_name: str | None) -> dict[str, str]:
    """A model directory and the 4B recipe's three data files; the training file's rows select `train_agent_name`
    (None: a raw file without the agent_name column)."""
    models, data = tmp_path / "models", tmp_path / "data"
    (models / "Qwen3-4B-RA-SFT").mkdir(parents=True)
    (models / "Qwen3-4B-RA-SFT" / "config.json").write_text("{}")
    data.mkdir()
    for name in ("open-agentrl-30k", "aime2024", "aime2025"):
        frame = pd.DataFrame({"data_source": ["math_dapo"] * 2})
        agent_name = train_agent_name if name == "open-agentrl-30k" else AGENT_NAME
        if agent_name is not None:
            frame["agent_name"] = agent_name
        frame.to_parquet(data / f"{name}.parquet")
    return {"MODEL_DIR": str(models), "DATA_DIR": str(data), "OUTPUT_ROOT": str(tmp_path / "out"), "DRY_RUN": "1"}


@pytest.mark.slow
def test_dry_run_finds_nothing_missing_with_model_data_and_a_live_judge(tmp_path, judge_url):
    result = run(RECIPES / "qwen3_4b_cleaner.sh", {**preflight_inputs(tmp_path, AGENT_NAME), "JUDGE_URL": judge_url})
    assert result.returncode == 0, result.stderr
    assert "DRY_RUN ok: Qwen3-4B-CLEANER" in result.stdout
    assert "would stop here" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("agent_name", [None, "tool_agent"])
def test_training_data_that_would_run_without_saar_is_refused(tmp_path, judge_url, agent_name):
    result = run(RECIPES / "qwen3_4b_cleaner.sh", {**preflight_inputs(tmp_path, agent_name), "JUDGE_URL": judge_url})
    train = tmp_path / "data" / "open-agentrl-30k.parquet"
    selected = "single_turn_agent (no agent_name: agent.default_agent_loop)" if agent_name is None else agent_name
    stop = result.stderr.split("DRY_RUN: a real run would stop here:\n", 1)[1].splitlines()
    assert stop[0].startswith(f"data: {train}: 2 of 2 rows would run without SAAR (2 select {selected};")
    assert f"set actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}" in stop[0]


def test_eval_needs_a_model_path(tmp_path):
    result = run(RECIPES / "eval" / "eval_aime_gpqa.sh", {"MODEL_PATH": "", "DRY_RUN": "1"})
    assert result.returncode != 0
    assert "set MODEL_PATH to the model directory" in result.stderr


@pytest.mark.slow
def test_prepare_data_builds_every_file_from_the_published_layout(tmp_path):
    raw = tmp_path / "raw"
    layout = {
        "Open-AgentRL-30K/Open-AgentRL-30K.parquet": "open-agentrl-30k",
        "Open-AgentRL-Eval/aime2024/aime_2024_problems.parquet": "aime2024",
        "Open-AgentRL-Eval/aime2025/aime_2025_problems.parquet": "aime2025",
        "Open-AgentRL-Eval/gpqa-diamond/gpqa_diamond.parquet": "gpqa-diamond",
        "Open-AgentRL-Eval/livecodebench-v6/livecodebench_v6.parquet": "livecodebench-v6",
    }
    for relative, sample in layout.items():
        path = raw / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [json.loads(line) for line in (SAMPLES / f"{sample}.sample.jsonl").read_text().splitlines()]
        pd.DataFrame(rows).to_parquet(path)
    result = run(RECIPES / "prepare_data.sh", {"RAW_DIR": str(raw), "DATA_DIR": str(tmp_path / "prepared")})
    assert result.returncode == 0, result.stderr
    produced = sorted(p.name for p in (tmp_path / "prepared").iterdir())
    assert produced == sorted(f"{name}{suffix}.parquet" for name in layout.values() for suffix in ("", ".notool"))
    notool = pd.read_parquet(tmp_path / "prepared" / "aime2025.notool.parquet")
    assert set(notool["agent_name"]) == {"single_turn_agent"}


@pytest.mark.slow
def test_data_filter_script(tmp_path):
    env = {
        "DATASET": str(SAMPLES / "open-agentrl-30k.sample.jsonl"),
        "STATS": str(SAMPLES / "filter-stats.sample.jsonl"),
        "FILTER_DIR": str(tmp_path / "filter"),
        "DATA_DIR": str(tmp_path / "prepared"),
    }
    result = run(ROOT / "data_filter.sh", env, "--success_rate_ratios", "0,1,1,1,1,1,1,1,0")
    assert result.returncode == 0, result.stderr
    assert "kept 5 of 7 rows" in result.stdout  # buckets 0/8 and 8/8 dropped
    kept = pd.read_parquet(tmp_path / "filter" / "filtered_sr.parquet")
    assert sorted(kept["successes"]) == [1, 2, 3, 4, 5]
    prepared = pd.read_parquet(tmp_path / "prepared" / "filtered_sr.parquet")
    assert len(prepared) == 5 and set(prepared["agent_name"]) == {AGENT_NAME}
    assert (tmp_path / "prepared" / "filtered_sr.notool.parquet").is_file()


@pytest.mark.slow
def test_data_filter_script_finds_the_reference_stats_file_where_the_reference_keeps_it(tmp_path):
    reference = tmp_path / "dataset" / "Open-AgentRL-30K"
    reference.mkdir(parents=True)
    rows = [json.loads(line) for line in (SAMPLES / "open-agentrl-30k.sample.jsonl").read_text().splitlines()]
    pd.DataFrame(rows).to_parquet(reference / "Open-AgentRL-30K.parquet")
    stats = (SAMPLES / "filter-stats.sample.jsonl").read_text()
    (reference / "Open-AgentRL-30K.filtered.parquet.success.jsonl").write_text(stats)
    env = {"CLEANER_ROOT": str(tmp_path), "STATS": ""}
    result = run(ROOT / "data_filter.sh", env, "--retain_code")
    assert result.returncode == 0, result.stderr
    # default ratios: of the math rows only the 3/8 one survives (a single row per bucket: int(1 * 0.8) = 0 at
    # 1/8); --retain_code keeps the three code rows (solved 2, 4 and 5 times), the 2/8 one included
    assert "kept 4 of 7 rows" in result.stdout
    assert (tmp_path / "dataset" / "prepared" / "filtered_sr.parquet").is_file()


def test_data_filter_script_says_which_input_is_missing(tmp_path):
    result = run(
        ROOT / "data_filter.sh",
        {"DATASET": str(tmp_path / "x.parquet"), "STATS": str(SAMPLES / "filter-stats.sample.jsonl")},
    )
    assert result.returncode == 1
    assert f"missing input file(s): DATASET={tmp_path / 'x.parquet'}" in result.stderr


@pytest.mark.parametrize("script", ["launch.sh", "cpu_process.sh", "eval/eval_common.sh"])
def test_libraries_refuse_to_run_directly(script):
    result = subprocess.run(["bash", str(RECIPES / script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "is a library" in result.stderr
