"""cleaner.verl.purification on verl's real advantage code (legacy trainer, no Ray): each trainer-side mode
zeroes the right masks before GRPO, dropped rows leave their group, and the audit is logged in every mode."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY, Turn
from cleaner.verl import group_statistics, purification
from cleaner.verl.purification import MANAGER, purification_problems

MASK = [1, 1, 0, 1, 1, 0]  # a call turn [0, 2), its tool output [2, 3), an answer turn [3, 5), a boundary token
CALL = Turn(0, 2, 1, 2, call=True, answer=False, failed=False)
FAILED = Turn(0, 2, 1, 2, call=True, answer=False, failed=True)
ANSWER = Turn(3, 5, None, None, call=False, answer=True, failed=False)
# One prompt, four rollouts: correct with a failed call, correct and clean, two incorrect and clean.
TURNS = [[FAILED, ANSWER], [CALL, ANSWER], [CALL, ANSWER], [CALL, ANSWER]]
SCORES = [1.0, 1.0, 0.0, 0.0]


def batch() -> DataProto:
    scores = torch.zeros(len(SCORES), len(MASK))
    scores[:, 4] = torch.tensor(SCORES)
    turns = np.empty(len(TURNS), dtype=object)
    turns[:] = [[turn.to_dict() for turn in row] for row in TURNS]
    return DataProto.from_dict(
        tensors={
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            "response_mask": torch.tensor([MASK] * len(SCORES), dtype=torch.float32),
        },
        non_tensors={
            "uid": np.array(["a"] * len(SCORES), dtype=object),
            TURNS_KEY: turns,
            GENERATED_TOKENS_KEY: np.array([8, 4, 4, 4], dtype=object),
        },
    )


def trainer_config(**multi_turn) -> OmegaConf:
    return OmegaConf.create(
        {
            "algorithm": {"adv_estimator": "grpo"},
            "actor_rollout_ref": {
                "rollout": {"n": 4, "multi_turn": multi_turn, "agent": {"agent_loop_manager_class": MANAGER}}
            },
        }
    )


@pytest.fixture
def install(monkeypatch):
    """purification.install(config) and group_statistics.install(), undone after the test."""
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", core_algos.compute_grpo_outcome_advantage)
    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)
    # verl's own data metrics need a whole step's batch; the audit is added to whatever they return.
    monkeypatch.setattr(ray_trainer, "compute_data_metrics", lambda batch, use_critic=True: {"verl": 1.0})
    monkeypatch.setattr(PPOTrainer, "_compute_advantage", PPOTrainer._compute_advantage)
    monkeypatch.setattr(purification, "_config", None)
    group_statistics.install()

    def _install(**multi_turn):
        purification.install(trainer_config(**multi_turn))
        purification.install(trainer_config(**multi_turn))  # idempotent

    return _install


def step(data: DataProto) -> tuple[DataProto, dict]:
    """What the legacy trainer does with a training batch: advantages, then its data metrics."""
    data = ray_trainer.compute_advantage(data, "grpo", num_repeat=4)
    return data, ray_trainer.compute_data_metrics(batch=data, use_critic=False)


def grpo(rewards: list[float]) -> list[float]:
    values = torch.tensor(rewards)
    return ((values - values.mean()) / (values.std() + 1e-6)).tolist()


def row_masks(data: DataProto) -> list[list[int]]:
    return data.batch["response_mask"].int().tolist()


def test_none_trains_every_mask_and_audits_the_reinforced_failure(install):
    install()
    data, metrics = step(batch())
    assert row_masks(data) == [MASK] * 4
    # 8 trained tokens with positive advantage (rows 0 and 1), 2 of them in row 0's failed turn, 1 in its code
    assert metrics["purify/reinforced_error_token_share"] == pytest.approx(2 / 8)
    assert metrics["purify/reinforced_error_code_token_share"] == pytest.approx(1 / 8)
    assert metrics["purify/penalized_success_token_share"] == pytest.approx(4 / 8)  # the incorrect rows' call turns
    assert metrics["purify/trained_token_share"] == pytest.approx(16 / 20)
    assert metrics["purify/dropped_trajectory_share"] == 0.0
    assert metrics["verl"] == 1.0


def test_error_turn_mask_masks_the_failed_turn_and_nothing_else(install):
    install(purification="error_turn_mask")
    data, metrics = step(batch())
    assert row_masks(data) == [[0, 0, 0, 1, 1, 0], MASK, MASK, MASK]
    assert data.batch["advantages"][0, :2].abs().sum() == 0
    assert metrics["purify/reinforced_error_token_share"] == 0.0


def test_error_trajectory_filter_drops_the_row_and_its_reward_leaves_the_group(install):
    install(purification="error_trajectory_filter")
    data, metrics = step(batch())
    assert row_masks(data) == [[0] * 6, MASK, MASK, MASK]
    expected = [0.0, *grpo([1.0, 0.0, 0.0])]
    assert data.batch["advantages"][:, 3].tolist() == pytest.approx(expected, abs=1e-5)
    assert metrics["purify/dropped_trajectory_share"] == 0.25


def test_void_turn_filter_drops_a_row_with_a_void_turn(install):
    install(purification="void_turn_filter")
    data = batch()
    void = Turn(3, 5, None, None, call=False, answer=False, failed=False)
    data.non_tensor_batch[TURNS_KEY][2] = [CALL.to_dict(), void.to_dict()]
    data, _ = step(data)
    assert row_masks(data) == [MASK, MASK, [0] * 6, MASK]


def test_roc_keeps_the_clean_correct_rollout_and_one_failure_as_the_group(install):
    install(purification="roc")  # n = 4, oversampling 2: a kept group of 2
    data, metrics = step(batch())
    masks = row_masks(data)
    assert masks[0] == [0] * 6 and masks[1] == MASK
    assert sorted(mask == MASK for mask in masks[2:]) == [False, True]
    kept = [row for row, mask in enumerate(masks) if any(mask)]
    assert data.batch["advantages"][kept, 3].tolist() == pytest.approx(grpo([1.0, 0.0]), abs=1e-5)
    assert metrics["purify/dropped_trajectory_share"] == 0.5
    assert metrics["purify/generated_tokens_per_trained_token"] == pytest.approx(20 / 8)


def test_a_batch_without_the_agent_loop_columns_is_left_alone(install):
    """v1's advantage helper calls compute_advantage on a batch of its own; the v1 hook applies the mode."""
    install(purification="error_trajectory_filter")
    data = batch()
    del data.non_tensor_batch[TURNS_KEY]
    data = ray_trainer.compute_advantage(data, "grpo", num_repeat=4)
    assert row_masks(data) == [MASK] * 4


@pytest.mark.parametrize(
    ("multi_turn", "rollout", "message"),
    [
        ({"purification": "rock"}, {}, "purification must be one of"),
        ({"purification": "none", "enable_tool_rollback": True}, {}, "contradicts"),
        ({"purification": "roc"}, {"n": 5}, r"rollout\.n=5 must be a multiple"),
        ({"purification": "roc"}, {"agent": {"agent_loop_manager_class": None}}, "agent_loop_manager_class="),
        ({"purification": "error_turn_mask", "save_negative_samples": True}, {}, "save_negative_samples"),
    ],
)
def test_the_start_up_check_refuses_naming_the_key(multi_turn, rollout, message):
    config = OmegaConf.merge(trainer_config(**multi_turn), {"actor_rollout_ref": {"rollout": rollout}})
    problems = purification_problems(config)
    assert any(re.search(message, problem) for problem in problems), problems


def test_roc_needs_a_group_relative_estimator():
    config = trainer_config(purification="roc")
    config.algorithm.adv_estimator = "gae"
    assert any("group-relative" in problem for problem in purification_problems(config))


@pytest.mark.parametrize(
    "mode", ["none", "saar", "error_turn_mask", "void_turn_filter", "error_trajectory_filter", "roc"]
)
def test_every_mode_passes_with_what_it_needs(mode):
    assert purification_problems(trainer_config(purification=mode)) == []


def test_the_records_grpo_rule_is_verls(install):
    """`cleaner.purify.audit.grpo_advantages` (recorded trajectories) equals verl's GRPO with group statistics."""
    from cleaner.purify.audit import grpo_advantages

    scores = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    groups = ["a", "a", "a", "a", "b", "b", "c", "d"]
    trained = [True, True, True, False, True, True, True, False]
    rewards = torch.zeros(len(scores), 3)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.tensor([[1.0, 1.0, 1.0] if row else [0.0] * 3 for row in trained])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(groups, dtype=object)},
    )
    verl = ray_trainer.compute_advantage(data, "grpo").batch["advantages"][:, 0]
    assert grpo_advantages(scores, groups, trained) == pytest.approx(verl.tolist(), abs=1e-5)
