"""The audit over recorded trajectories: a mode applied to record groups, GRPO advantages, the figures."""

from __future__ import annotations

import pytest

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.records import audit_records
from cleaner.purify.turns import Turn

MASK = [1, 1, 0, 1, 1]
FAILED = Turn(0, 2, 1, 2, call=True, answer=False, failed=True)
CALL = Turn(0, 2, 1, 2, call=True, answer=False, failed=False)
ANSWER = Turn(3, 5, None, None, call=False, answer=True, failed=False)


def record(uid: str, score: float, first: Turn, spans=()) -> dict:
    return {
        "uid": uid,
        "score": score,
        "response_mask": MASK,
        "purify_turns": [first.to_dict(), ANSWER.to_dict()],
        "purify_generated_tokens": 6,
        "saar_spliced_spans": list(spans),
    }


RECORDS = [record("p", 1.0, FAILED), record("p", 0.0, CALL), record("q", 1.0, CALL, [[0, 2, 1, "deep"]])]


def test_none_reinforces_the_failed_turn_of_the_correct_record():
    audit = audit_records(RECORDS, PurificationConfig())
    # group p: rewards (1, 0) -> +-0.707; group q alone -> verl's rule for a group of one: mean 0, std 1
    assert audit.advantages == pytest.approx([2**-0.5, -(2**-0.5), 1.0], rel=1e-5)
    figures = audit.counts.figures()
    assert figures["reinforced_error_token_share"] == pytest.approx(2 / 8)
    assert figures["penalized_success_token_share"] == pytest.approx(2 / 4)
    assert figures["offpolicy_token_share"] == pytest.approx(2 / 12)
    assert audit.kept == [True, True, True]


def test_error_trajectory_filter_drops_the_record_and_regroups():
    audit = audit_records(RECORDS, PurificationConfig(purification=Purification.ERROR_TRAJECTORY_FILTER))
    assert audit.kept == [False, True, True]
    assert audit.advantages == pytest.approx([0.0, 0.0, 1.0], rel=1e-5)  # p keeps one record: a group of one
    assert audit.counts.figures()["dropped_trajectory_share"] == pytest.approx(1 / 3)


def test_groups_can_be_split_by_any_key():
    audit = audit_records(RECORDS, PurificationConfig(), group_of=lambda item: f"{item['uid']}#{item['score']}")
    assert audit.advantages == pytest.approx([1.0, 0.0, 1.0], rel=1e-5)
