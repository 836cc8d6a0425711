"""recipe/cleaner/qwen3_4b_cleaner_dpo.sh composes with DRY_RUN=1, and its bad settings stop the dry run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # runs the recipe script (verl's Hydra composition in a subprocess)

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipe" / "cleaner" / "qwen3_4b_cleaner_dpo.sh"
MARKER = "--- composed config ---"


def dry_run(tmp_path: Path, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "PYTHON": sys.executable,
        "OUTPUT_ROOT": str(tmp_path),
        "MODEL_PATH": str(tmp_path / "no-such-model"),
        "DRY_RUN": "1",
        **env,
    }
    return subprocess.run(
        ["bash", str(RECIPE), *overrides], env=environment, capture_output=True, text=True, timeout=300
    )


def test_the_recipe_composes_with_negatives_and_dpo_on_the_v1_trainer(tmp_path):
    result = dry_run(tmp_path)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout.split(MARKER, 1)[1].rsplit("DRY_RUN ok", 1)[0])
    algorithm, multi_turn = config["algorithm"], config["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert algorithm["adv_estimator"] == "grpo_tool_dpo"
    assert (algorithm["use_dpo_on_tool_calls"], algorithm["dpo_beta"], algorithm["dpo_max_adjustment_ratio"]) == (
        True,
        0.1,
        0.1,
    )
    assert (multi_turn["enable_tool_rollback"], multi_turn["save_negative_samples"]) == (True, True)
    assert multi_turn["max_negative_samples_per_group"] == 1
    assert config["trainer"]["use_v1"] is True
    agent = config["actor_rollout_ref"]["rollout"]["agent"]
    assert agent["agent_loop_manager_class"] == "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager"
    # everything else is CLEANER-4B's: SAAR on every trajectory, log-probs recomputed on the purified sequence
    assert multi_turn["rollback_probability"] == 1.0
    assert config["actor_rollout_ref"]["rollout"]["calculate_log_probs"] is False


def test_a_bad_setting_stops_the_dry_run_naming_the_key(tmp_path):
    """One case end to end; every check is covered in test_tool_dpo_checks.py."""
    result = dry_run(tmp_path, "algorithm.dpo_beta=0")
    assert result.returncode == 1
    assert "algorithm.dpo_beta must be a number > 0" in result.stderr
