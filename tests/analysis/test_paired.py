"""The paired SAAR on/off comparison the demo prints: pairing, shared-prefix check, kept errors, intervals."""

from __future__ import annotations

import math

import pytest

from cleaner.analysis.paired import (
    MIN_PAIRS_FOR_INTERVAL,
    acted_pairs,
    kept_errors,
    pair_up,
    paired_difference,
    paired_differences,
    shares_prefix,
    t_quantile_975,
)
from cleaner.saar.outcome import ErrorCategory
from cleaner.saar.stats import RollbackEvent, TrajectoryStats


def record(problem: str, saar: bool, response_ids: list[int], turns: list[tuple[int, int]], **kw) -> dict:
    """A rollout record as `cleaner rollout` writes it, with the fields the comparison reads.

    `turns` are the (start, end) token ranges of the assistant turns; the rest of the response is context.
    """
    stats = TrajectoryStats(response_tokens=len(response_ids))
    for category in kw.get("failures", []):
        stats.count_failure(category)
    stats.purified_errors = kw.get("purified", 0)
    stats.rollback_events = kw.get("events", [])
    pieces = [
        {"role": "assistant", "turn": turn, "start": start, "end": end, "text": "", "spliced_attempt": None}
        for turn, (start, end) in enumerate(turns)
    ]
    return {
        "problem_id": problem,
        "sample": kw.get("sample", 0),
        "saar": saar,
        "acc": 1.0 if kw.get("correct") else 0.0,
        "score": 1.0 if kw.get("correct") else 0.0,
        "response_ids": response_ids,
        "pieces": pieces,
        "timing": {"generated_tokens": kw.get("generated", len(response_ids))},
        **stats.to_extra_fields(),
    }


def event(position: int, mode: str, exception: str = "ValueError") -> RollbackEvent:
    return RollbackEvent(
        position=position,
        failed_code="print(str(3**10000))",
        error_category=ErrorCategory.EXCEPTION.value,
        exception_type=exception,
        error_text=f"{exception}: ...",
        replacement_code=None if mode == "failed" else "import sys",
        similarity=None if mode == "failed" else 0.8,
        mode=mode,
        retries=1,
        resampled_tokens=5,
        model_errors=1,
    )


# Turn 0 = tokens 0..3, then a tool response (3..5), then turn 1 (5..8).
TURNS = [(0, 3), (5, 8)]


def recovered_pair(off_prefix_ids=(1, 2, 3)) -> tuple[dict, dict]:
    """SAAR rolled back turn 0's failing call: on keeps no error, off keeps it and answers later."""
    on = record(
        "p", True, [1, 2, 4, 9, 9, 7, 7, 7], TURNS, correct=True,
        failures=[ErrorCategory.EXCEPTION], purified=1, events=[event(0, "shallow")],
    )  # fmt: skip
    off = record("p", False, [*off_prefix_ids, 9, 9, 6, 6, 6], TURNS, correct=False, failures=[ErrorCategory.EXCEPTION])
    return on, off


def test_pairs_match_problem_and_sample_and_leave_unmatched_out():
    on, off = recovered_pair()
    lone = record("q", True, [1], [(0, 1)])
    other_sample = record("p", False, [1], [(0, 1)], sample=1)
    pairs = pair_up([off, lone, on, other_sample])
    assert [(pair.key, pair.on["saar"], pair.off["saar"]) for pair in pairs] == [("p#0", True, False)]
    with pytest.raises(ValueError, match="two SAAR-on records for p#0"):
        pair_up([on, on])


def test_kept_errors_subtracts_what_a_recovered_rollback_removed():
    on, off = recovered_pair()
    assert (kept_errors(on), kept_errors(off)) == (0, 1)


def test_shared_prefix_is_checked_up_to_the_turn_where_saar_first_acted():
    on, off = recovered_pair()
    # SAAR acted at turn 0, which starts at token 0: nothing before it has to match.
    assert shares_prefix(pair_up([on, off])[0])
    on_late = dict(on, saar_rollback_events=[event(1, "deep").to_dict()])
    assert not shares_prefix(pair_up([on_late, off])[0]), "turn 0 differs (token 2) before SAAR acted at turn 1"
    off_same_turn0 = record("p", False, [1, 2, 4, 9, 9, 6, 6, 6], TURNS)
    assert shares_prefix(pair_up([on_late, off_same_turn0])[0])
    # Where SAAR never acted, the two trajectories must be identical.
    quiet_on = record("q", True, [1, 2, 3], [(0, 3)])
    assert shares_prefix(pair_up([quiet_on, record("q", False, [1, 2, 3], [(0, 3)])])[0])
    assert not shares_prefix(pair_up([quiet_on, record("q", False, [1, 2, 5], [(0, 3)])])[0])


def test_t_quantiles_match_the_table():
    for df, table in [(3, 3.182), (5, 2.571), (13, 2.160), (27, 2.052), (100, 1.984)]:
        assert t_quantile_975(df) == pytest.approx(table, rel=0.01)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile_975(MIN_PAIRS_FOR_INTERVAL - 2)


def test_paired_difference_and_its_interval():
    on, off = [1.0, 0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]
    diff = paired_difference("accuracy", on, off)
    assert (diff.on, diff.off, diff.difference) == (pytest.approx(0.6), pytest.approx(0.2), pytest.approx(0.4))
    # differences 1,0,0,1,0: sd = sqrt(0.3), t(4) = 2.776
    assert diff.half_width == pytest.approx(2.776 * math.sqrt(0.3) / math.sqrt(5), rel=0.01)
    low, high = diff.interval()
    assert low < 0.4 < high
    assert paired_difference("accuracy", on[:3], off[:3]).interval() is None, "too few pairs for an interval"
    with pytest.raises(ValueError, match="same number"):
        paired_difference("accuracy", on, off[:2])


def test_paired_metrics_and_acted_pairs_of_a_recovered_rollback():
    on, off = recovered_pair()
    quiet_on, quiet_off = record("q", True, [1], [(0, 1)]), record("q", False, [1], [(0, 1)])
    pairs = pair_up([on, off, quiet_on, quiet_off])
    by_metric = {diff.metric: diff for diff in paired_differences(pairs)}
    assert by_metric["accuracy"].difference == pytest.approx(0.5)
    assert by_metric["tool errors kept / trajectory"].difference == pytest.approx(-0.5)
    assert by_metric["tool errors sampled / trajectory"].difference == 0
    [acted] = acted_pairs(pairs)
    assert (acted.key, acted.errors, acted.modes) == ("p#0", ["ValueError"], ["shallow"])
    assert (acted.on_correct, acted.off_correct, acted.on_kept_errors, acted.off_kept_errors) == (True, False, 0, 1)
    assert acted.shares_prefix
