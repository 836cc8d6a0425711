"""Off-policy gap of spliced tokens: which tokens are scored in which context, and the numbers built from them."""

from __future__ import annotations

import math

import pytest

from cleaner.analysis.offpolicy import (
    ScoredTrajectory,
    control_indices,
    event_log_is,
    gate_table,
    offpolicy_markdown,
    record_splices,
    score_trajectory,
    span_table,
    with_log_is,
)
from cleaner.saar.offpolicy_summary import quantile
from support.offpolicy_records import BEHAVIOUR, PROMPT, RESPONSE, record


class RecordingScorer:
    """log π of token t at full-sequence index i: -t/100 - i/1000, so every value names its token and place."""

    def __init__(self):
        self.calls = []

    async def __call__(self, sequence, indices):
        self.calls.append((list(sequence), list(indices)))
        return [-sequence[i] / 100 - i / 1000 for i in indices]


def expected(response_index: int) -> float:
    i = len(PROMPT) + response_index
    return -RESPONSE[response_index] / 100 - i / 1000 - BEHAVIOUR[response_index]


async def test_spliced_and_control_tokens_are_scored_in_the_final_sequence():
    scorer = RecordingScorer()
    scored = await score_trajectory(record(), scorer)
    # One call over prompt + response; spliced and control model tokens, never the context (mask 0) tokens.
    [(sequence, indices)] = scorer.calls
    assert sequence == PROMPT + RESPONSE
    assert indices == [len(PROMPT) + i for i in (0, 1, 2, 3, 6, 7, 8)]
    deep, shallow = scored.spans
    assert (deep.position, deep.kind) == (0, "deep") and (shallow.position, shallow.kind) == (1, "shallow")
    assert deep.deltas == pytest.approx([expected(i) for i in range(4)])
    assert shallow.deltas == pytest.approx([expected(7), expected(8)])
    assert shallow.log_is == pytest.approx(expected(7) + expected(8))
    assert control_indices(record()) == [6]
    assert scored.control_deltas == pytest.approx([expected(6)])
    assert ScoredTrajectory.from_dict(scored.to_dict()) == scored


async def test_log_is_is_written_into_each_rollback_event():
    scored = await score_trajectory(record(), RecordingScorer(), with_control=False)
    updated = with_log_is(record(), scored)
    events = updated["saar_rollback_events"]
    assert events[0]["log_is_ratio"] == pytest.approx(sum(expected(i) for i in range(4)))
    assert events[1]["log_is_ratio"] == pytest.approx(expected(7) + expected(8))
    assert [event["is_tokens"] for event in events] == [4, 2]
    assert event_log_is([updated]) == {"deep": [events[0]["log_is_ratio"]], "shallow": [events[1]["log_is_ratio"]]}
    assert scored.control_deltas == []


async def test_span_kinds_come_from_the_span_or_else_from_the_rollback_mode():
    # Spans of four entries carry their kind; a position whose retries all failed keeps its last attempt.
    exhausted = {
        **record(),
        "saar_spliced_spans": [[0, 4, 1, "deep"], [7, 9, 3, "exhausted"]],
        "saar_rollback_events": [{"position": 0, "mode": "deep"}, {"position": 1, "mode": "failed"}],
    }
    scored = await score_trajectory(exhausted, RecordingScorer())
    assert [span.kind for span in scored.spans] == ["deep", "exhausted"]
    old_layout = {**exhausted, "saar_spliced_spans": [[0, 4, 1], [7, 9, 3]]}
    assert [span.kind for span in (await score_trajectory(old_layout, RecordingScorer())).spans] == [
        "deep",
        "exhausted",
    ]
    assert "| spliced, not recovered (last attempt kept) | 2 |" in offpolicy_markdown([scored])
    assert event_log_is([with_log_is(exhausted, scored)]).keys() == {"deep", "exhausted"}


async def test_a_record_without_behaviour_logprobs_is_refused():
    bad = {**record(), "response_logprobs": None}
    with pytest.raises(ValueError, match="no response_logprobs"):
        await score_trajectory(bad, RecordingScorer())


async def test_a_span_outside_any_rollback_turn_is_refused():
    bad = {**record(), "saar_rollback_events": [{"position": 0, "mode": "deep"}]}
    with pytest.raises(ValueError, match="turn 1, which has no rollback event"):
        await score_trajectory(bad, RecordingScorer())


def test_span_table_counts_ratios_outside_half_and_two():
    table = span_table({"shallow": [math.log(0.25), math.log(0.9), math.log(3.0), math.log(1.1)]})
    row = next(line for line in table.splitlines() if line.startswith("| shallow"))
    assert row.endswith("| 25% | 25% |")
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([5.0], 0.9) == 5.0


def test_gate_table_shows_both_statistics_by_decision():
    """From the events a gated `cleaner rollout` records: log IS and mean d per token, replaced apart from appended."""
    events = [
        {"mode": "deep", "log_is_ratio": -8.0, "is_tokens": 4, "is_decision": "append"},
        {"mode": "shallow", "log_is_ratio": -0.2, "is_tokens": 2, "is_decision": "replace"},
        {"mode": "failed", "log_is_ratio": -30.0, "is_tokens": 10, "is_decision": None},
        {"mode": "deep", "log_is_ratio": None, "is_tokens": None, "is_decision": None},
    ]
    splices = record_splices([{"saar_rollback_events": events[:2]}, {"saar_rollback_events": events[2:]}])
    assert [(s.kind, s.decision) for s in splices] == [("deep", "append"), ("shallow", "replace"), ("exhausted", None)]
    rows = gate_table(splices).splitlines()[2:]
    assert rows[0].startswith("| replace | 1 | -0.200 | -0.200 | -0.200 | -0.100 |")
    assert rows[1].startswith("| append | 1 | -8.000 |") and "| -2.000 |" in rows[1]
    assert rows[2].startswith("| measured only | 1 | -30.0 |")
    assert event_log_is([{"saar_rollback_events": events}]) == {"deep": [-8.0], "shallow": [-0.2], "exhausted": [-30.0]}


async def test_markdown_has_spliced_and_control_rows_by_kind():
    text = offpolicy_markdown([await score_trajectory(record(), RecordingScorer())])
    assert "| spliced, shallow | 2 |" in text and "| spliced, deep | 4 |" in text
    assert "| control (not spliced) | 1 |" in text
    assert "| deep | 1 |" in text
    assert offpolicy_markdown([]).startswith("Off-policy spliced tokens: no rollback")
