"""The v1 trainer hook: verl's own multi-trajectory advantage step reaches the estimator with old log-probs and links."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.v1 import utils as v1_utils
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from cleaner.saar.negatives import CallSpan, Link, SampleLinks
from cleaner.verl.tool_dpo import hooks
from cleaner.verl.tool_dpo.estimator import ToolDpoError

ALGORITHM = {"adv_estimator": "grpo_tool_dpo", "norm_adv_by_std_in_grpo": True}


def data(scores: list[float], log_probs: torch.Tensor) -> DataProto:
    rows, width = log_probs.shape
    rewards = torch.zeros(rows, width)
    rewards[:, -1] = torch.tensor(scores)
    return DataProto.from_dict(
        tensors={
            "token_level_rewards": rewards,
            "response_mask": torch.ones(rows, width, dtype=torch.int64),
            "old_log_probs": log_probs,
        },
        non_tensors={"uid": np.array(["u"] * rows, dtype=object)},
    )


def advantage_step(batch: DataProto, estimator: str, use_dpo: bool = True) -> DataProto:
    """What `PPOTrainer._compute_advantage` runs, from its call into verl's v1 utils on."""
    config = OmegaConf.create({**ALGORITHM, "adv_estimator": estimator, "use_dpo_on_tool_calls": use_dpo})
    return v1_utils.compute_advantage_for_multi_trajectories(
        batch,
        batch_keys=[f"u_{i}_0" for i in range(len(batch))],
        adv_estimator=estimator,
        config=config,
    )


@pytest.fixture(autouse=True, scope="module")
def installed():
    hooks.install()


def test_install_wraps_verl_once():
    first = (PPOTrainer._compute_advantage, v1_utils.compute_advantage)
    hooks.install()
    assert (PPOTrainer._compute_advantage, v1_utils.compute_advantage) == first
    assert getattr(v1_utils.compute_advantage, "__wrapped__", None) is not None


def test_the_estimator_gets_old_log_probs_links_and_reports_metrics():
    log_probs = torch.zeros(3, 4)
    log_probs[2, 1:3] = -3.0  # the negative's call was unlikely: delta = 3
    samples = [
        SampleLinks(False, (Link("p", CallSpan(0, 2)),), 0),
        SampleLinks(False, (), 1),
        SampleLinks(True, (Link("p", CallSpan(1, 3)),), 0),
    ]
    metrics: dict = {}
    with hooks.advantage_step(samples, metrics):
        result = advantage_step(data([1.0, 0.0, 1.0], log_probs), "grpo_tool_dpo")
    advantages = result.batch["advantages"]
    assert advantages[0, 0] > advantages[0, 3] > 0  # GRPO + adjustment on the call span only
    assert advantages[2, 0] == 0 and advantages[2, 1] < 0
    assert metrics["grpo/num_negative_samples"] == 1.0 and metrics["tool_dpo/pairs"] == 1.0
    assert metrics["tool_dpo/logp_diff_mean"] == pytest.approx(3.0)
    assert metrics["tool_dpo/dropped_negatives"] == 1.0
    assert torch.equal(result.batch["returns"], advantages)


def test_other_estimators_pass_through_unchanged():
    batch = data([1.0, 0.0], torch.zeros(2, 4))
    result = advantage_step(batch, "grpo")
    assert torch.allclose(result.batch["advantages"][:, 0], torch.tensor([0.7071, -0.7071]), atol=1e-4)


def test_outside_the_trainer_step_it_refuses():
    with pytest.raises(ToolDpoError, match="trainer.use_v1=True"):
        advantage_step(data([1.0, 0.0], torch.zeros(2, 4)), "dapo_tool_dpo")


def test_a_record_per_row_is_required():
    with hooks.advantage_step([SampleLinks(False, (), 0)], {}), pytest.raises(ToolDpoError, match="records"):
        advantage_step(data([1.0, 0.0], torch.zeros(2, 4)), "grpo_tool_dpo")
