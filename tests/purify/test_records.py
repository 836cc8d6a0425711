"""The audit over recorded trajectories: a mode applied to record groups, GRPO advantages, the figures."""

from __future__ import annotations

import pytest

from cleaner.purify.audit import removed_figures
from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.failed_calls import FailedCall
from cleaner.purify.records import SingleSampleGroupsError, audit_records
from cleaner.purify.turns import Turn

MASK = [1, 1, 0, 1, 1]
FAILED = Turn(0, 2, 1, 2, call=True, answer=False, failed=True)
CALL = Turn(0, 2, 1, 2, call=True, answer=False, failed=False)
ANSWER = Turn(3, 5, None, None, call=False, answer=True, failed=False)
KEPT_FAILURE = FailedCall(0, ("exception",), turn_tokens=2, call_tokens=1, fate="kept", start=0, end=2, code_start=1,
                          code_end=2)  # fmt: skip
# a first attempt of 3 tokens (its call 2) that SAAR rolled back and replaced by a shallow splice of tokens 0..1
ROLLED_BACK = FailedCall(0, ("syntax_error",), turn_tokens=3, call_tokens=2, fate="rolled_back",
                         negative_candidate=True)  # fmt: skip


def record(uid: str, score: float, first: Turn, failed=(), spans=()) -> dict:
    return {
        "uid": uid,
        "score": score,
        "response_mask": MASK,
        "purify_turns": [first.to_dict(), ANSWER.to_dict()],
        "purify_generated_tokens": 6,
        "saar_spliced_spans": list(spans),
        "purify_failed_calls": [call.to_dict() for call in failed],
    }


RECORDS = [
    record("p", 1.0, FAILED, [KEPT_FAILURE]),
    record("p", 0.0, FAILED, [KEPT_FAILURE]),
    record("q", 1.0, CALL, [ROLLED_BACK], [[0, 2, 1, "shallow"]]),
    record("q", 0.0, CALL),
]
FAILED_TOKENS, FAILED_CODE_TOKENS = 2 + 2 + 3, 1 + 1 + 2


def test_none_reinforces_the_failed_turn_of_the_correct_record():
    audit = audit_records(RECORDS, PurificationConfig())
    assert audit.advantages == pytest.approx([2**-0.5, -(2**-0.5)] * 2, rel=1e-5)
    figures = audit.counts.figures()
    assert figures["reinforced_error_token_share"] == pytest.approx(2 / 8)
    assert figures["penalized_success_token_share"] == pytest.approx(2 / 8)
    assert figures["offpolicy_token_share"] == pytest.approx(2 / 16)
    assert audit.kept == [True] * 4


def test_every_failed_call_generated_is_counted_kept_or_rolled_back():
    counts = audit_records(RECORDS, PurificationConfig()).counts
    assert (counts.failed_calls, counts.failed_tokens, counts.failed_code_tokens) == (3, FAILED_TOKENS, 4)
    figures = counts.figures()
    # the kept failure of the correct record is reinforced, that of the incorrect one penalized, the rolled-back
    # attempt trains nothing; a shallow splice of 2 trained tokens (positive advantage) stands in its place
    assert figures["failed_call_reinforced_share"] == pytest.approx(2 / FAILED_TOKENS)
    assert figures["failed_call_penalized_share"] == pytest.approx(2 / FAILED_TOKENS)
    assert figures["failed_call_untrained_share"] == pytest.approx(3 / FAILED_TOKENS)
    assert figures["failed_call_code_reinforced_share"] == pytest.approx(1 / FAILED_CODE_TOKENS)
    assert figures["failed_call_code_untrained_share"] == pytest.approx(2 / FAILED_CODE_TOKENS)
    assert figures["failed_call_rolled_back_share"] == pytest.approx(3 / FAILED_TOKENS)
    assert figures["failed_call_replacement_share"] == pytest.approx(2 / FAILED_TOKENS)
    assert figures["failed_call_replacement_reinforced_share"] == pytest.approx(2 / FAILED_TOKENS)


@pytest.mark.parametrize("mode", [Purification.ERROR_TURN_MASK, Purification.ERROR_TRAJECTORY_FILTER])
def test_a_mode_that_removes_failed_calls_keeps_the_denominator_and_reports_them_removed(mode):
    counts = audit_records(RECORDS, PurificationConfig(purification=mode)).counts
    assert (counts.failed_tokens, counts.failed_code_tokens) == (FAILED_TOKENS, FAILED_CODE_TOKENS)
    assert counts.figures()["failed_call_untrained_share"] == 1.0
    assert "failed_call_reinforced_share" in removed_figures(mode)
    assert "failed_call_penalized_share" in removed_figures(mode)
    assert removed_figures(Purification.NONE) == removed_figures(Purification.SAAR) == frozenset()


def test_the_negative_sample_setting_trains_the_rolled_back_attempts_call_with_negative_advantage():
    counts = audit_records(RECORDS, PurificationConfig(purification=Purification.SAAR), negative_limit=1).counts
    assert counts.failed_tokens == FAILED_TOKENS  # the same denominator as without negatives
    figures = counts.figures()
    assert figures["failed_call_penalized_share"] == pytest.approx((2 + 2) / FAILED_TOKENS)  # + the call's 2 tokens
    assert figures["failed_call_code_penalized_share"] == pytest.approx((1 + 2) / FAILED_CODE_TOKENS)
    assert figures["failed_call_untrained_share"] == pytest.approx(1 / FAILED_TOKENS)  # its reasoning stays out
    assert counts.trajectories == 4  # a negative sample is no trajectory: today's figures do not change


def test_the_negative_limit_caps_the_negatives_per_trajectory():
    second = FailedCall(0, ("exception",), turn_tokens=4, call_tokens=4, fate="rolled_back", negative_candidate=True)
    records = [record("q", 1.0, CALL, [ROLLED_BACK, second]), record("q", 0.0, CALL)]
    assert audit_records(records, PurificationConfig(), negative_limit=1).counts.failed_penalized == 2
    assert audit_records(records, PurificationConfig(), negative_limit=2).counts.failed_penalized == 2 + 4


def test_error_trajectory_filter_drops_the_records_and_regroups():
    audit = audit_records(RECORDS, PurificationConfig(purification=Purification.ERROR_TRAJECTORY_FILTER))
    assert audit.kept == [False, False, True, True]
    assert audit.advantages == pytest.approx([0.0, 0.0, 2**-0.5, -(2**-0.5)], rel=1e-5)
    assert audit.counts.figures()["dropped_trajectory_share"] == pytest.approx(2 / 4)


def test_groups_can_be_split_by_any_key():
    audit = audit_records(RECORDS, PurificationConfig(), group_of=lambda item: "all")
    assert audit.advantages == pytest.approx([0.866, -0.866, 0.866, -0.866], rel=1e-3)


def test_groups_of_one_are_refused_with_how_to_get_groups():
    with pytest.raises(SingleSampleGroupsError, match=r"cleaner rollout -n 4"):
        audit_records([record("p", 1.0, FAILED), record("q", 0.0, CALL)], PurificationConfig())


def test_a_record_without_the_failed_call_record_is_counted_as_unrecorded():
    records = [dict(RECORDS[0]), RECORDS[1]]
    del records[0]["purify_failed_calls"]
    counts = audit_records(records, PurificationConfig()).counts
    assert (counts.failed_unrecorded, counts.failed_tokens) == (1, 2)
