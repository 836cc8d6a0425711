"""cleaner.verl.group_statistics: a trajectory whose loss mask drop_infra_error_trajectories zeroed stays out of
its GRPO group's mean and std, through verl's real advantage code (legacy and v1 trainers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from cleaner.verl import group_statistics

WIDTH = 4
# Group "a": three healthy samples (rewards 1, 0, 1) and one whose judge was unreachable (reward 0, mask zeroed).
# Group "b": two healthy samples, untouched.
UIDS = ["a", "a", "a", "a", "b", "b"]
REWARDS = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
DROPPED = 3


def batch() -> DataProto:
    rewards = torch.zeros(len(UIDS), WIDTH)
    rewards[:, -1] = torch.tensor(REWARDS)
    mask = torch.ones(len(UIDS), WIDTH)
    mask[DROPPED] = 0
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(UIDS, dtype=object)},
    )


def expected_advantages() -> torch.Tensor:
    """GRPO over the healthy samples only: group a's mean and std are those of (1, 0, 1)."""
    healthy_a = torch.tensor([1.0, 0.0, 1.0])
    healthy_b = torch.tensor([1.0, 0.0])
    scalars = torch.cat(
        [
            (healthy_a - healthy_a.mean()) / (healthy_a.std() + 1e-6),
            torch.tensor([0.0]),
            (healthy_b - healthy_b.mean()) / (healthy_b.std() + 1e-6),
        ]
    )
    return scalars.unsqueeze(-1) * batch().batch["response_mask"]


@pytest.fixture
def installed(monkeypatch):
    """install(), undone after the test (it replaces verl's functions in this process)."""
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", dict(core_algos.ADV_ESTIMATOR_REGISTRY))
    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", core_algos.compute_grpo_outcome_advantage)
    group_statistics.install()
    group_statistics.install()  # idempotent


def test_without_the_hook_the_dropped_reward_shifts_the_healthy_advantages():
    advantages = compute_advantage(batch(), "grpo").batch["advantages"]
    assert not torch.allclose(advantages, expected_advantages(), atol=1e-5)


def test_legacy_trainer_grpo_leaves_the_dropped_trajectory_out_of_its_group(installed):
    advantages = compute_advantage(batch(), "grpo").batch["advantages"]
    torch.testing.assert_close(advantages, expected_advantages(), atol=1e-5, rtol=0)
    assert advantages[DROPPED].abs().sum() == 0


def test_v1_trainer_grpo_leaves_the_dropped_trajectory_out_of_its_group(installed):
    keys = [f"{uid}_0_0" for uid in ["p", "q", "r", "s", "t", "u"]]
    data = compute_advantage_for_multi_trajectories(batch(), batch_keys=keys, adv_estimator="grpo")
    torch.testing.assert_close(data.batch["advantages"], expected_advantages(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["grpo_vectorized", "rloo"])
def test_registry_estimators_leave_it_out_too(installed, name):
    data = batch()
    advantages, _ = core_algos.get_adv_estimator_fn(name)(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=None,
    )
    healthy = [row for row in range(len(UIDS)) if row != DROPPED]
    reference = data.select_idxs(healthy)
    expected, _ = core_algos.ADV_ESTIMATOR_REGISTRY[name].__wrapped__(
        token_level_rewards=reference.batch["token_level_rewards"],
        response_mask=reference.batch["response_mask"],
        index=reference.non_tensor_batch["uid"],
        config=None,
    )
    torch.testing.assert_close(advantages[healthy], expected)
    assert advantages[DROPPED].abs().sum() == 0


def test_a_batch_without_untrained_rows_keeps_its_index():
    index = np.array(["a", "b"], dtype=object)
    assert group_statistics.group_index(index, torch.ones(2, 3)) is index
