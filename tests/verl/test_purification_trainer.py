"""cleaner.verl.purification on verl's real advantage code (legacy trainer, no Ray): each trainer-side mode
zeroes the right masks before GRPO (dropped rows leave their group) or after it (void rows stay in the baseline),
RoC removes its cut rollouts where the batch is balanced, and the audit is logged in every mode."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from cleaner.purify.roc import RocCounts
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY, Turn
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
            "attention_mask": torch.ones(len(SCORES), 2 + len(MASK), dtype=torch.int64),  # a 2-token prompt
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
    monkeypatch.setattr(PPOTrainer, "_balance_batch", PPOTrainer._balance_batch)
    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "_balance_batch", ray_trainer.RayPPOTrainer._balance_batch)
    monkeypatch.setattr(purification, "_config", None)
    monkeypatch.setattr(purification, "_removed", [])
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


def test_void_rows_leave_the_loss_but_stay_in_the_grpo_baseline(install):
    """SimpleTIR's [1, 1, 0 void, 0 void]: the correct rows get verl's GRPO over all four rows, +0.87."""
    install(purification="void_turn_filter")
    data = batch()
    data.batch["token_level_scores"][:, 4] = data.batch["token_level_rewards"][:, 4] = torch.tensor([1.0, 1, 0, 0])
    void = Turn(3, 5, None, None, call=False, answer=False, failed=False, void=True)
    for row in (2, 3):
        data.non_tensor_batch[TURNS_KEY][row] = [CALL.to_dict(), void.to_dict()]
    data, metrics = step(data)
    assert row_masks(data) == [MASK, MASK, [0] * 6, [0] * 6]
    assert grpo([1.0, 1.0, 0.0, 0.0])[0] == pytest.approx(0.866, abs=1e-3)
    assert data.batch["advantages"][:, 3].tolist() == pytest.approx([*grpo([1.0, 1.0, 0.0, 0.0])[:2], 0, 0], abs=1e-5)
    assert metrics["purify/dropped_trajectory_share"] == 0.5


CLEAN_COUNTS = RocCounts(tool_responses=1, error_responses=0, answer_opens=1, answers=1, assistant_turns=1)
ERROR_COUNTS = RocCounts(tool_responses=1, error_responses=1, answer_opens=1, answers=1, assistant_turns=1)


def roc_batch() -> DataProto:
    """Two prompts of 4 rollouts: `a` mixed (its correct row 0 kept a failed call), `b` all correct."""
    data = batch()
    data = DataProto.concat([data, batch()])
    data.non_tensor_batch["uid"] = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    scores = torch.zeros(8, len(MASK))
    scores[:, 4] = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    data.batch["rm_scores"] = scores
    counts = np.empty(8, dtype=object)
    counts[:] = [(ERROR_COUNTS if row == 0 else CLEAN_COUNTS).to_dict() for row in range(8)]
    data.non_tensor_batch[ROC_COUNTS_KEY] = counts
    data.non_tensor_batch["row"] = np.arange(8)
    return data


class LegacyTrainer:
    """What verl's RayPPOTrainer._balance_batch and the RoC hook read of the trainer: data-parallel size and
    mini-batch settings."""

    def __init__(self, dp_size: int, ppo_mini_batch_size: int):
        self.config = OmegaConf.create({"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": ppo_mini_batch_size}}})
        self.actor_rollout_wg, self.use_critic, self.dp_size = None, False, dp_size

    def _get_dp_size(self, worker_group, role):
        return self.dp_size


def balance(trainer: LegacyTrainer, data: DataProto) -> tuple[dict, list[int]]:
    """verl's own legacy `_balance_batch` as installed (RoC's hook around it); returns its metrics and the batch's
    original row numbers in their new order."""
    metrics: dict[str, float] = {}
    ray_trainer.RayPPOTrainer._balance_batch(trainer, data, metrics)
    return metrics, data.non_tensor_batch["row"].tolist()


def by_row(data: DataProto, rows: list[int]) -> DataProto:
    """`data` back in the original row order (verl's balancing shuffles it), for per-row checks."""
    data.reorder(torch.tensor(sorted(range(len(rows)), key=rows.__getitem__)))
    return data


def test_roc_removes_the_cut_rollouts_before_the_batch_is_balanced(install):
    install(purification="roc")  # n = 4, oversampling 2: a kept group of 2
    data = roc_batch()
    trainer = LegacyTrainer(dp_size=2, ppo_mini_batch_size=1)  # a multiple of lcm(2, 1 x 4) = 4 rows
    metrics, rows = balance(trainer, data)
    # group a: round(2 x 2 / 4) = 1 correct, the clean one (row 1), and the first failure (row 2); group b has
    # equal rewards and leaves; two cut rows (0 and 3) stay as padding, mask 0, each its own group
    assert sorted(rows) == [0, 1, 2, 3] and len(data) == 4
    assert "global_seqlen/balanced_max" in metrics  # verl balanced the kept rows
    data = by_row(data, rows)
    assert row_masks(data) == [[0] * 6, MASK, MASK, [0] * 6]
    assert data.non_tensor_batch["uid"][[1, 2]].tolist() == ["a", "a"]
    assert not {"a", "b"} & set(data.non_tensor_batch["uid"][[0, 3]].tolist())
    assert metrics["purify/roc_kept_rows"] == 2 and metrics["purify/roc_padding_rows"] == 2
    assert metrics["purify/roc_rejected_equal_reward_groups"] == 1
    data, audit = step(data)
    assert data.batch["advantages"][[1, 2], 3].tolist() == pytest.approx(grpo([1.0, 0.0]), abs=1e-5)
    assert data.batch["advantages"][[0, 3]].abs().sum() == 0
    # every sampled row is audited: the 4 removed ones as generated and untrained
    assert audit["purify/trajectories"] == 8 and audit["purify/trained_tokens"] == 8


def test_roc_kept_rows_on_a_multiple_need_no_padding(install):
    install(purification="roc")
    trainer = LegacyTrainer(dp_size=2, ppo_mini_batch_size=1)
    data = roc_batch()
    data.batch["rm_scores"][4:, 4] = torch.tensor([1.0, 0.0, 1.0, 0.0])  # group b mixed too: 4 rows kept
    metrics, rows = balance(trainer, data)
    assert sorted(rows) == [1, 2, 4, 5] and metrics["purify/roc_padding_rows"] == 0


def test_roc_hands_verl_the_kept_rows_to_balance_and_applies_its_order(install):
    """The rows verl's partitioning sees are the kept ones with their own lengths: the batch ends in the order
    verl's balancing gives them, by workload per data-parallel rank."""
    install(purification="roc")
    data = roc_batch()
    data.batch["rm_scores"][4:, 4] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    data.batch["attention_mask"] = torch.ones(8, 12, dtype=torch.int64)
    data.batch["attention_mask"][:, 8:] = torch.tensor([[0] * 4] * 4 + [[1] * 4] * 4)  # rows 4-7 longer
    metrics, rows = balance(LegacyTrainer(dp_size=2, ppo_mini_batch_size=1), data)
    first_rank, second_rank = rows[:2], rows[2:]
    # each rank gets one of the long kept rows (4, 5) and one of the short ones (1, 2)
    assert sorted(first_rank + second_rank) == [1, 2, 4, 5]
    assert all(sum(row >= 4 for row in rank) == 1 for rank in (first_rank, second_rank))
    assert metrics["global_seqlen/balanced_min"] == metrics["global_seqlen/balanced_max"] == 8 + 12


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
        ({"purification": "roc"}, {"trainer": {"use_v1": False, "balance_batch": False}}, "trainer.balance_batch"),
    ],
)
def test_the_start_up_check_refuses_naming_the_key(multi_turn, rollout, message):
    trainer = rollout.pop("trainer", {})
    config = OmegaConf.merge(
        trainer_config(**multi_turn), {"actor_rollout_ref": {"rollout": rollout}, "trainer": trainer}
    )
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
