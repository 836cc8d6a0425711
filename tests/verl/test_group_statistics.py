"""cleaner.verl.group_statistics: a trajectory whose loss mask drop_infra_error_trajectories zeroed stays out of
its GRPO group's mean and std, through verl's real advantage code (legacy and v1 trainers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
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
    monkeypatch.setattr(ReplayBuffer, "_dapo_filtered_keys", ReplayBuffer._dapo_filtered_keys)
    group_statistics.install()
    group_statistics.install()  # idempotent


def released(function):
    """verl's own function under any of this module's wrappers."""
    while getattr(function, group_statistics._MARK, False):
        function = function.__wrapped__
    return function


@pytest.fixture
def as_released(monkeypatch):
    """verl's functions as released, also where another test in this process (a loop manager's) installed the
    hooks for good."""
    registry = {name: released(estimator) for name, estimator in core_algos.ADV_ESTIMATOR_REGISTRY.items()}
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", registry)
    monkeypatch.setattr(
        core_algos, "compute_grpo_outcome_advantage", released(core_algos.compute_grpo_outcome_advantage)
    )
    monkeypatch.setattr(ReplayBuffer, "_dapo_filtered_keys", released(ReplayBuffer._dapo_filtered_keys))


def test_without_the_hook_the_dropped_reward_shifts_the_healthy_advantages(as_released):
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


def test_a_group_left_with_one_trained_row_gets_zero_advantage_a_group_of_one_keeps_verls_rule(installed):
    """Group "c" lost a row to the mask: its survivor has no baseline, so it teaches nothing (not its raw reward).
    Group "d" was one row from the start (rollout.n=1): verl's single-sample rule stays."""
    rewards = torch.zeros(3, WIDTH)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0])
    mask = torch.ones(3, WIDTH)
    mask[1] = 0
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(["c", "c", "d"], dtype=object)},
    )
    advantages = compute_advantage(data, "grpo").batch["advantages"]
    assert advantages[0].abs().sum() == 0 and advantages[1].abs().sum() == 0
    torch.testing.assert_close(advantages[2], torch.ones(WIDTH))
    assert group_statistics.lone_trained_rows(["c", "c", "d"], [True, False, True]) == [0]


# ---------------------------------------------------------------- DAPO's group filter (v1 ReplayBuffer)

# uid -> (metric per row, trained per row). "a" is the group [1, 1, 1, dropped 0].
GROUPS = {
    "a": ([1.0, 1.0, 1.0, 0.0], [True, True, True, False]),
    "b": ([1.0, 0.0, 1.0, 1.0], [True, True, True, False]),  # trained rows differ: kept
    "c": ([1.0, 1.0, 1.0, 1.0], [True] * 4),  # verl's own rule: evicted
    "d": ([0.0, 1.0, 1.0, 1.0], [True, False, False, False]),  # one trained row: no group signal, evicted
    "e": ([1.0, 0.0, 0.0, 1.0], [True] * 4),  # kept
}


class FakeTransferQueue:
    """The calls verl's ReplayBuffer and the hook make, over the GROUPS above (finished prompt groups)."""

    def __init__(self, metric: str):
        from verl.utils import tensordict_utils as tu

        self.tu, self.rows, self.tags = tu, {}, {}
        for uid, (values, trained) in GROUPS.items():
            self.tags[uid] = {"is_prompt": True, "status": "finished", "global_steps": 1}
            for session, (value, has_tokens) in enumerate(zip(values, trained, strict=True)):
                key = f"{uid}_{session}_0"
                self.tags[key] = {"status": "success"}
                scores = torch.zeros(3)
                scores[-1] = value if metric == "reward" else 0.0
                self.rows[key] = {
                    "rm_scores": scores,
                    "response_mask": torch.ones(3) if has_tokens else torch.zeros(3),
                    "extra_fields": {"reward_extra_info": {metric: value}},
                }

    def kv_list(self):
        return {"train": dict(self.tags)}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return self.tu.list_of_dict_to_tensordict(
            [{name: self.rows[key][name] for name in select_fields} for key in keys]
        )


def dapo_evictions(monkeypatch, metric: str) -> tuple[set[str], dict]:
    import transfer_queue

    fake = FakeTransferQueue(metric)
    monkeypatch.setattr(transfer_queue, "kv_list", fake.kv_list)
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    buffer = ReplayBuffer(
        trainer_mode="sync",
        trainer_config={},
        max_off_policy_threshold=None,
        max_off_policy_strategy="drop",
        sampler_kwargs={},
        refill_fn=lambda count: None,
        filter_groups_metric=metric,
        train_batch_size=len(GROUPS),
        gen_batch_size=1,
    )
    buffer._sync_metadata_from_transfer_queue()
    _, dapo_uids, _, counts = buffer._terminal_eviction_reasons(1, "train")
    return dapo_uids, dict(counts)


def test_without_the_hook_dapo_keeps_a_group_whose_only_difference_is_a_dropped_row(as_released, monkeypatch):
    assert dapo_evictions(monkeypatch, "reward")[0] == {"c"}


@pytest.mark.parametrize("metric", ["reward", "acc"])
def test_dapo_filters_a_group_with_a_dropped_row_on_its_trained_rows_only(installed, monkeypatch, metric):
    evicted, counts = dapo_evictions(monkeypatch, metric)
    assert evicted == {"a", "c", "d"}
    assert counts == {1.0: 2, 0.0: 1}  # a and c under 1, d under its one trained row's 0


def test_a_group_without_any_trained_row_is_evicted_under_its_lowest_value():
    assert group_statistics.classify_on_trained_rows([1.0, 0.0], [False, False]) == 0.0
    assert group_statistics.classify_on_trained_rows([1.0, 0.0, 1.0], [True, True, False]) is None
