"""rollback/offpolicy/*: recomputed vs rollout log-probs on spliced tokens and, as the control, on the other
trained tokens; through verl's real legacy `compute_data_metrics` with the cleaner hook, which only reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto

from cleaner.verl import trainer_metrics
from cleaner.verl.offpolicy_metrics import OffpolicyRow, offpolicy_metrics

WIDTH = 10
M = "rollback/offpolicy/"
SCORING_FAILED = M + "scoring_failed"


def rows() -> list[OffpolicyRow]:
    """Row 0: a deep span [5, 8) whose tokens lost 1 nat each in the purified context; control tokens drift 0.01.
    Row 1: a shallow span [2, 4) whose tokens gained 1 nat each; no drift elsewhere."""
    mask0 = torch.tensor([1, 1, 1, 0, 0, 1, 1, 1, 1, 0], dtype=torch.float32)
    rollout0 = torch.full((WIDTH,), -0.51)
    rollout0[5:8] = 0.5
    rollout1 = torch.full((WIDTH,), -0.5)
    rollout1[2:4] = -1.5
    old = torch.full((WIDTH,), -0.5)
    return [
        OffpolicyRow(old, rollout0 * mask0, mask0, [[5, 8, 1, "deep"]]),
        OffpolicyRow(old.clone(), rollout1, torch.ones(WIDTH), [[2, 4, 1, "shallow"]]),
    ]


def expected() -> dict[str, float]:
    """Spans: deep log IS -3 (d -1, -1, -1), shallow +2 (d +1, +1); quantiles in log space."""
    return {
        M + "spliced/tokens": 5,
        M + "spliced/log_ratio_mean": -1 / 5,
        M + "spliced/log_ratio_p10": -1,
        M + "spliced/log_ratio_p50": -1,
        M + "spliced/log_ratio_min": -1,
        M + "spliced/spans": 2,
        M + "spliced/span_log_is_p10": -3 + 0.1 * 5,
        M + "spliced/span_log_is_p50": -0.5,
        M + "spliced/span_log_is_p90": -3 + 0.9 * 5,
        M + "spliced/span_share_below_0.5": 0.5,
        M + "spliced/span_share_above_2": 0.5,
        M + "deep/tokens": 3,
        M + "deep/log_ratio_mean": -1,
        M + "deep/span_log_is_p10": -3,
        M + "deep/span_log_is_p90": -3,
        M + "deep/span_share_below_0.5": 1,
        M + "shallow/log_ratio_mean": 1,
        M + "shallow/span_share_above_2": 1,
        M + "control/tokens": 12,
        M + "control/log_ratio_mean": 0.04 / 12,
        M + "control/log_ratio_p50": 0,
        M + "control/log_ratio_min": 0,
        M + "control/spans": 4,  # row 0: [0, 3) and [8, 9); row 1: [0, 2) and [4, 10)
        M + "control/span_share_below_0.5": 0,
    }


def test_spliced_and_control_tokens_are_measured_apart_shallow_and_deep_apart():
    metrics = offpolicy_metrics(rows())
    assert {key: metrics[key] for key in expected()} == pytest.approx(expected())
    assert M + "exhausted/tokens" not in metrics  # no such span: left out, not 0
    assert not [key for key in metrics if "span_is_p" in key]  # ratio quantiles read 0 on real spans: log space only


def test_an_exhausted_span_is_kept_apart_from_spliced():
    """The kept last attempt of an unrecovered position is no replacement: its own group, not in `spliced`."""
    row = rows()[0]
    metrics = offpolicy_metrics(
        [OffpolicyRow(row.old_log_probs, row.rollout_log_probs, row.response_mask, [[5, 8, 3, "exhausted"]])]
    )
    assert metrics[M + "exhausted/tokens"] == 3 and metrics[M + "exhausted/span_log_is_p50"] == pytest.approx(-3)
    assert M + "spliced/tokens" not in metrics


def test_a_span_without_its_kind_counts_as_spliced_only_and_untrained_tokens_count_nowhere():
    row = rows()[0]
    metrics = offpolicy_metrics(
        [OffpolicyRow(row.old_log_probs, row.rollout_log_probs, row.response_mask, [[3, 7, 1]])]
    )
    assert metrics[M + "spliced/tokens"] == 2  # 3 and 4 are mask 0
    assert M + "deep/tokens" not in metrics and metrics[M + "control/tokens"] == 5
    assert offpolicy_metrics([]) == {}


# The gate's records of the two splices (row 0 appended, row 1 replaced) and an unscored unrecovered position.
EVENTS = [
    [{"mode": "deep", "log_is_ratio": -3.0, "is_tokens": 3, "is_decision": "append"}],
    [
        {"mode": "shallow", "log_is_ratio": 2.0, "is_tokens": 2, "is_decision": "replace"},
        {"mode": "failed", "log_is_ratio": None, "is_tokens": None, "is_decision": None},
    ],
]
GATE = {
    "rollback/is_gate/scored": 2,
    "rollback/is_gate/log_ratio_p10": -2.5,
    "rollback/is_gate/log_ratio_p50": -0.5,
    "rollback/is_gate/log_ratio_p90": 1.5,
    "rollback/is_gate/log_ratio_per_token_mean": -1 / 5,
    "rollback/is_gate/per_token_p10": -1 + 0.1 * 2,
    "rollback/is_gate/per_token_p90": -1 + 0.9 * 2,
}


def object_column(values: list) -> np.ndarray:
    """One entry per row, each a list (numpy would otherwise make a 2-D array of the lists' items)."""
    column = np.empty(len(values), dtype=object)
    for row, value in enumerate(values):
        column[row] = value
    return column


def legacy_batch() -> DataProto:
    """What verl's legacy trainer holds when it computes a step's metrics (old log-probs recomputed)."""
    built = rows()
    responses = torch.arange(2 * WIDTH).reshape(2, WIDTH)
    response_mask = torch.stack([row.response_mask for row in built])
    rewards = torch.zeros(2, WIDTH)
    rewards[:, -1] = torch.tensor([1.0, 0.0])
    return DataProto.from_dict(
        tensors={
            "prompts": torch.ones(2, 3, dtype=torch.long),
            "responses": responses,
            "input_ids": torch.cat([torch.ones(2, 3, dtype=torch.long), responses], dim=1),
            "attention_mask": torch.ones(2, 3 + WIDTH, dtype=torch.long),
            "response_mask": response_mask,
            "token_level_scores": rewards,
            "token_level_rewards": rewards.clone(),
            "advantages": torch.tensor([[0.7], [-0.7]]) * response_mask,
            "returns": torch.tensor([[0.7], [-0.7]]) * response_mask,
            "old_log_probs": torch.stack([row.old_log_probs for row in built]),
            "rollout_log_probs": torch.stack([row.rollout_log_probs for row in built]),
        },
        non_tensors={
            "saar_spliced_spans": np.array([[[5, 8, 1, "deep"]], [[2, 4, 1, "shallow"]]], dtype=object),
            "saar_rollback_events": object_column(EVENTS),
            "uid": np.array(["u", "u"], dtype=object),
        },
    )


def test_legacy_trainer_logs_them_and_leaves_the_batch_as_it_was():
    from verl.trainer.ppo import ray_trainer

    trainer_metrics.install()
    batch = legacy_batch()
    before = {key: value.clone() for key, value in batch.batch.items()}
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
    assert {key: metrics[key] for key in expected()} == pytest.approx(expected())
    assert {key: metrics[key] for key in GATE} == pytest.approx(GATE)  # tunable from the gate's own log ratios
    assert metrics["rollback/groups_with_one_trained_row"] == 0
    assert "critic/advantages/mean" in metrics  # verl's own metrics are still there
    # Read-only: every tensor the loss is computed from (log-probs, advantages, mask) is unchanged.
    assert before.keys() == set(batch.batch.keys())
    assert all(torch.equal(before[key], batch.batch[key]) for key in before)


def test_without_rollout_log_probs_there_is_nothing_to_compare():
    from verl.trainer.ppo import ray_trainer

    trainer_metrics.install()
    batch = legacy_batch()
    batch.batch.pop("rollout_log_probs")
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
    assert not [key for key in metrics if key.startswith(M) and not key.startswith(SCORING_FAILED)]
    # the scoring failures come from the rollback events, with or without rollout log-probs
    assert metrics[SCORING_FAILED] == 0


def test_positions_left_unscored_are_logged_by_why():
    from verl.trainer.ppo import ray_trainer

    trainer_metrics.install()
    batch = legacy_batch()
    events = batch.non_tensor_batch["saar_rollback_events"]
    failed = {**events[0][0], "log_is_ratio": None, "is_decision": "append", "is_error": "x", "is_failure": "refused"}
    events[0] = [failed, *events[0][1:]]
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
    assert (metrics[SCORING_FAILED], metrics[SCORING_FAILED + "/refused"], metrics[SCORING_FAILED + "/aborted"]) == (
        1,
        1,
        0,
    )


def test_a_group_left_with_one_trained_row_is_counted():
    from verl.trainer.ppo import ray_trainer

    trainer_metrics.install()
    batch = legacy_batch()
    batch.batch["response_mask"][1] = 0  # drop_infra_error_trajectories zeroed row 1: row 0 is alone in group "u"
    metrics = ray_trainer.compute_data_metrics(batch=batch, use_critic=False)
    assert metrics["rollback/groups_with_one_trained_row"] == 1
