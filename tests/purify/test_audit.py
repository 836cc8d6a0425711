"""The audit figures on hand-computed examples."""

from __future__ import annotations

import pytest

from cleaner.purify.audit import AuditRow, audit_counts, audit_metrics, grpo_advantages
from cleaner.purify.config import Purification
from cleaner.purify.failed_calls import FailedCall
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
            "purify/failed_call_tokens": 0.0,
            "purify/failed_calls": 0.0,
            "purify/failed_call_unrecorded_trajectories": 3.0,
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


# The failed call of FAILED_CALL as the loop records it (kept, tokens 0..3, its call 2..3), and a rolled-back attempt.
KEPT = FailedCall(
    0, ("exception",), turn_tokens=4, call_tokens=2, fate="kept", start=0, end=4, code_start=2, code_end=4
)
ROLLED_BACK = FailedCall(0, ("bad_call",), turn_tokens=5, call_tokens=3, fate="rolled_back", negative_candidate=True)


def failed_row(mask, advantages, spans=()) -> AuditRow:
    return AuditRow([FAILED_CALL, GOOD_CALL, ANSWER], mask, advantages, generated_tokens=21, spliced_spans=spans,
                    failed_calls=[KEPT, ROLLED_BACK])  # fmt: skip


def test_failed_call_shares_count_every_generated_failed_token_by_its_sign():
    advantages = [1.0, 1.0, -1.0, 0.0] + [1.0] * 8  # a per-token advantage: one token each sign, one zero
    counts = audit_counts([failed_row(MASK, advantages, [[6, 9, 1, "shallow"], [10, 12, 2, "exhausted"]])])
    assert (counts.failed_calls, counts.failed_tokens, counts.failed_code_tokens) == (2, 9, 5)
    assert (counts.failed_reinforced, counts.failed_penalized, counts.failed_untrained) == (2, 1, 6)
    assert (counts.failed_code_reinforced, counts.failed_code_penalized, counts.failed_code_untrained) == (0, 1, 4)
    assert counts.failed_rolled_back == 5
    # only the shallow/deep splice stands in for a cut attempt; an exhausted span is a kept attempt
    assert (counts.replacement, counts.replacement_reinforced) == (3, 3)
    figures = counts.figures()
    shares = [figures[f"failed_call_{kind}_share"] for kind in ("reinforced", "penalized", "untrained")]
    assert shares == pytest.approx([2 / 9, 1 / 9, 6 / 9]) and sum(shares) == pytest.approx(1.0)


def test_a_negative_sample_row_adds_its_trained_call_by_sign_and_nothing_else():
    negative = AuditRow((), [0, 0, 1, 1, 1], -0.3, generated_tokens=0, negative_sample=True)
    alone, both = audit_counts([failed_row(MASK, 0.0)]), audit_counts([failed_row(MASK, 0.0), negative])
    assert both.failed_penalized - alone.failed_penalized == 3 == both.failed_code_penalized
    assert (both.trajectories, both.trained, both.generated, both.failed_tokens) == (1, 9, 21, 9)


def test_a_mode_that_removes_failed_calls_logs_them_as_removed_not_as_zero():
    masked = [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1]
    metrics = audit_metrics([failed_row(masked, 1.0)], mode=Purification.ERROR_TURN_MASK)
    assert "purify/failed_call_reinforced_share" not in metrics and "purify/failed_call_penalized_share" not in metrics
    assert metrics["purify/failed_call_untrained_share"] == 1.0
    assert metrics["purify/failed_call_signal_removed"] == 1.0
    measured = audit_metrics([failed_row(masked, 1.0)], mode=Purification.NONE)
    assert measured["purify/failed_call_reinforced_share"] == 0.0 and measured["purify/failed_call_signal_removed"] == 0
