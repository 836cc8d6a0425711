"""Negative samples and tool DPO: settings that cannot train fail at config time, naming the key."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from omegaconf import OmegaConf

from cleaner.saar.config import SaarConfigError
from cleaner.verl.tool_dpo.checks import check_tool_dpo_config, tool_dpo_problems
from cleaner.verl.tool_dpo.settings import ToolDpoConfigError
from cleaner.verl.trainer_config import compose_trainer_config

MT = "actor_rollout_ref.rollout.multi_turn"
GOOD = {
    "algorithm.adv_estimator": "grpo_tool_dpo",
    "+algorithm.use_dpo_on_tool_calls": "True",
    "+algorithm.dpo_beta": "0.1",
    "+algorithm.dpo_max_adjustment_ratio": "0.1",
    f"+{MT}.enable_tool_rollback": "True",
    f"+{MT}.save_negative_samples": "True",
    f"+{MT}.max_negative_samples_per_group": "1",
    "+actor_rollout_ref.rollout.agent.agent_loop_manager_class": "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager",
}


@pytest.fixture(scope="module")
def composed():
    """verl's trainer config as the DPO recipe composes it (composed once: Hydra takes a while)."""
    return compose_trainer_config([f"{key}={value}" for key, value in GOOD.items()])


@pytest.fixture
def config(composed):
    """A copy of the composed config with `changes` (dotted key -> value) applied."""

    def make(changes: dict[str, Any] | None = None):
        changed = copy.deepcopy(composed)
        for key, value in (changes or {}).items():
            OmegaConf.update(changed, key, value, force_add=True)
        return changed

    return make


def test_the_recipe_settings_pass(config):
    check_tool_dpo_config(config())
    check_tool_dpo_config(config({"algorithm.adv_estimator": "dapo_tool_dpo"}))


def test_negatives_without_dpo_pass(config):
    check_tool_dpo_config(config({"algorithm.use_dpo_on_tool_calls": False}))


def test_a_plain_grpo_config_is_not_concerned():
    assert tool_dpo_problems(compose_trainer_config(["algorithm.adv_estimator=grpo"])) == []


def test_problems_are_reported_as_config_checks_report_them(config):
    [problem] = tool_dpo_problems(config({"trainer.use_v1": False}))
    assert "trainer.use_v1=True" in problem


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({f"{MT}.save_negative_samples": False}, "use_dpo_on_tool_calls=True needs negative samples"),
        ({f"{MT}.enable_tool_rollback": False}, "needs SAAR"),
        ({"algorithm.dpo_beta": 0.0}, "algorithm.dpo_beta must be a number > 0"),
        ({"algorithm.dpo_beta": -2}, "algorithm.dpo_beta must be a number > 0"),
        ({"algorithm.dpo_max_adjustment_ratio": 0}, "dpo_max_adjustment_ratio must be a number > 0"),
        ({"algorithm.adv_estimator": "grpo"}, "use_dpo_on_tool_calls=True needs algorithm.adv_estimator"),
        (
            {"algorithm.adv_estimator": "grpo", "algorithm.use_dpo_on_tool_calls": False},
            "would train the negatives as if they were ordinary samples",
        ),
        (
            {f"{MT}.save_negative_samples": False, "algorithm.use_dpo_on_tool_calls": False},
            "adv_estimator=grpo_tool_dpo needs",
        ),
        ({f"{MT}.max_negative_samples_per_group": 0}, "would keep no negative"),
        ({"trainer.use_v1": False}, "trainer.use_v1=True"),
        (
            {
                "actor_rollout_ref.rollout.agent.agent_loop_manager_class": "verl.experimental.agent_loop.AgentLoopManager"
            },
            "hooks the estimator into the trainer",
        ),
    ],
)
def test_bad_settings_fail_with_the_key_named(config, changes, message):
    with pytest.raises(ToolDpoConfigError, match=message):
        check_tool_dpo_config(config(changes))


def test_bad_saar_values_fail_in_saar_config(config):
    with pytest.raises(SaarConfigError, match="max_negative_samples_per_group"):
        check_tool_dpo_config(config({f"{MT}.max_negative_samples_per_group": -1}))
