"""The audit figures on hand-computed examples."""

from __future__ import annotations

import pytest

from cleaner.purify.audit import AuditRow, audit_counts, audit_metrics, grpo_advantages
from cleaner.purify.turns import Turn

MASK = [1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1]  # 9 trained tokens
FAILED_CALL = Turn(0, 4, 2, 4, call=True, answer=False, failed=True)  # code = tokens 2, 3
GOOD_FIRST = Turn(0, 4, 2, 4, call=True, answer=False, failed=False)
GOOD_CALL = Turn(6, 9, 7, 9, call=True, answer=False, failed=False)
ANSWER = Turn(10, 12, None, None, call=False, answer=True, failed=False)

ROWS = [
    # correct, kept a failed call, SAAR spliced tokens 6..8
    AuditRow([FAILED_CALL, GOOD_CALL, ANSWER], MASK, 1.0, generated_tokens=20, spliced_spans=[[6, 9, 1, "shallow"]]),
    # incorrect, every call succeeded
    AuditRow([GOOD_FIRST, GOOD_CALL, ANSWER], MASK, [-1.0] * 12, generated_tokens=12),
    # dropped by a mode
    AuditRow([GOOD_FIRST, GOOD_CALL, ANSWER], [0] * 12, 0.0, generated_tokens=10),
]


def test_counts():
    counts = audit_counts(ROWS)
    assert (counts.trajectories, counts.dropped, counts.generated, counts.trained) == (3, 1, 42, 18)
    assert (counts.positive, counts.positive_on_failed_turn, counts.positive_on_failed_code) == (9, 4, 2)
    assert (counts.negative, counts.negative_on_successful_call, counts.offpolicy) == (9, 7, 3)


def test_metrics():
    assert audit_metrics(ROWS) == pytest.approx(
        {
            "purify/reinforced_error_token_share": 4 / 9,
            "purify/reinforced_error_code_token_share": 2 / 9,
            "purify/penalized_success_token_share": 7 / 9,
            "purify/trained_token_share": 18 / 42,
            "purify/dropped_trajectory_share": 1 / 3,
            "purify/generated_tokens_per_trained_token": 42 / 18,
            "purify/offpolicy_token_share": 3 / 18,
            "purify/trajectories": 3.0,
            "purify/trained_tokens": 18.0,
            "purify/generated_tokens": 42.0,
        }
    )


def test_a_figure_without_denominator_is_left_out():
    metrics = audit_metrics([ROWS[2]])
    assert "purify/reinforced_error_token_share" not in metrics
    assert "purify/generated_tokens_per_trained_token" not in metrics
    assert metrics["purify/dropped_trajectory_share"] == 1.0
    assert audit_metrics([]) == {}


def test_masked_tokens_carry_no_advantage_into_the_figures():
    masked_failure = [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1]  # error_turn_mask's result for row 0
    metrics = audit_metrics([AuditRow([FAILED_CALL, GOOD_CALL, ANSWER], masked_failure, 1.0, generated_tokens=20)])
    assert metrics["purify/reinforced_error_token_share"] == 0.0


def test_grpo_advantages_match_verl_rule():
    advantages = grpo_advantages([1.0, 0.0, 1.0, 0.0, 5.0], ["a", "a", "a", "b", "a"], [True, True, True, True, False])
    std = (1 / 3) ** 0.5
    assert advantages == pytest.approx([(1 / 3) / std, -(2 / 3) / std, (1 / 3) / std, 0.0, 0.0], rel=1e-5)


def test_the_one_trained_row_left_of_a_group_gets_no_advantage_as_in_the_trainer():
    """A filter that leaves one trained row of four gives it 0 (cleaner.verl.group_statistics); a group of one from
    the start keeps verl's single-sample rule (its score)."""
    advantages = grpo_advantages(
        [1.0, 0.0, 0.0, 0.0, 1.0], ["a", "a", "a", "a", "b"], [True, False, False, False, True]
    )
    assert advantages == [0.0, 0.0, 0.0, 0.0, pytest.approx(1.0)]
