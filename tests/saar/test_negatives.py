"""cleaner.saar.negatives: the failed-attempt sample, the success span, the per-trajectory cap and the link fields."""

from __future__ import annotations

import pytest

from cleaner.saar.negatives import (
    NEGATIVE_LINKS_KEY,
    NEGATIVE_SAMPLE_KEY,
    NEGATIVES_DROPPED_KEY,
    CallSpan,
    FailedAttempt,
    NegativeCollector,
    NegativeFieldsError,
    failed_attempt,
    negative_fields,
    positive_fields,
    read_sample_links,
    success_span,
)
from cleaner.saar.splice import StreamLengths

PROMPT = [101, 102, 103]
# response so far: turn A (mask 1), tool response (mask 0), then the failed turn and its feedback
BEFORE = [11, 12, 13, 0, 0]
BEFORE_MASK = [1, 1, 1, 0, 0]
BEFORE_LP = [-0.1, -0.2, -0.3, 0.0, 0.0]
FAILED = [21, 22, 23, 24]  # reasoning 21, call 22..24
FAILED_LP = [-1.0, -2.0, -3.0, -4.0]
FEEDBACK = [0, 0, 0]


def stream():
    ids = PROMPT + BEFORE + FAILED + FEEDBACK
    mask = BEFORE_MASK + [1] * len(FAILED) + [0] * len(FEEDBACK)
    logprobs = BEFORE_LP + FAILED_LP + [0.0] * len(FEEDBACK)
    return ids, mask, logprobs, StreamLengths(len(PROMPT) + len(BEFORE), len(BEFORE), len(BEFORE))


def test_failed_attempt_is_the_context_before_the_turn_plus_the_turn_with_only_the_call_trained():
    ids, mask, logprobs, base = stream()
    sample = failed_attempt(ids, mask, logprobs, base, FAILED, FAILED_LP, failed_boundary=1, num_turns=4)
    assert sample.ids == PROMPT + BEFORE + FAILED
    assert sample.prompt_length == len(PROMPT)
    assert sample.mask == [0] * len(BEFORE) + [0, 1, 1, 1]
    assert sample.logprobs == BEFORE_LP + FAILED_LP
    assert sample.call == CallSpan(len(BEFORE) + 1, len(BEFORE) + 4)
    assert sample.num_turns == 4


def test_a_turn_without_a_call_boundary_trains_the_whole_turn():
    ids, mask, logprobs, base = stream()
    sample = failed_attempt(ids, mask, None, base, FAILED, None, failed_boundary=None, num_turns=4)
    assert sample.mask[len(BEFORE) :] == [1, 1, 1, 1] and sample.logprobs is None
    assert sample.call == CallSpan(len(BEFORE), len(BEFORE) + 4)


def test_failed_attempt_rejects_impossible_input():
    ids, mask, logprobs, base = stream()
    with pytest.raises(ValueError, match="boundary"):
        failed_attempt(ids, mask, logprobs, base, FAILED, FAILED_LP, failed_boundary=4, num_turns=4)
    with pytest.raises(ValueError, match="beyond the stream"):
        failed_attempt(ids[:2], mask, logprobs, base, FAILED, FAILED_LP, failed_boundary=1, num_turns=4)
    with pytest.raises(ValueError, match="tokens"):
        failed_attempt(ids, mask, logprobs, base, [], [], failed_boundary=None, num_turns=4)


def test_success_span_is_the_spliced_call():
    assert success_span(10, 14, "shallow", replacement_boundary=3) == CallSpan(10, 14)
    assert success_span(10, 20, "deep", replacement_boundary=6) == CallSpan(16, 20)
    assert success_span(10, 20, "deep", replacement_boundary=None) == CallSpan(10, 20)


def sample(call: CallSpan) -> FailedAttempt:
    return FailedAttempt(
        ids=[1] * (call.end + 3), mask=[0] * call.start + [1] * len(call), logprobs=None, call=call, num_turns=2
    )


def test_the_cap_keeps_the_first_negatives_and_counts_the_rest():
    collector = NegativeCollector(limit=2)
    for start in (0, 4, 8):
        collector.offer(sample(CallSpan(start, start + 2)), CallSpan(start, start + 3))
    pairs, dropped = collector.finish(response_length=100, positive_mask=[1] * 100)
    assert [pair.negative.call.start for pair in pairs] == [0, 4] and dropped == 1
    assert len({pair.pair_id for pair in pairs}) == 2


def test_spans_are_clipped_at_the_response_cut_and_emptied_pairs_dropped():
    collector = NegativeCollector(limit=3)
    collector.offer(sample(CallSpan(2, 6)), CallSpan(2, 5))  # negative clipped to [2, 5)
    collector.offer(sample(CallSpan(1, 3)), CallSpan(6, 9))  # positive clipped to [6, 8)
    collector.offer(sample(CallSpan(5, 7)), CallSpan(1, 2))  # negative cut away entirely
    pairs, dropped = collector.finish(response_length=5, positive_mask=[1] * 8)
    assert [(pair.negative.call, pair.success) for pair in pairs] == [
        (CallSpan(2, 5), CallSpan(2, 5)),
        (CallSpan(1, 3), CallSpan(6, 8)),
    ]
    assert dropped == 1


def test_a_trajectory_that_is_not_trained_takes_its_negatives_with_it():
    collector = NegativeCollector(limit=2)
    collector.offer(sample(CallSpan(0, 2)), CallSpan(3, 5))
    collector.offer(sample(CallSpan(4, 6)), CallSpan(6, 8))
    assert collector.finish(100, [0] * 10) == ([], 2)  # e.g. zeroed by drop_infra_error_trajectories
    pairs, dropped = collector.finish(100, [0] * 6 + [1] * 4)
    assert [pair.success for pair in pairs] == [CallSpan(6, 8)] and dropped == 1


def test_fields_round_trip_through_the_reader():
    collector = NegativeCollector(limit=1)
    collector.offer(sample(CallSpan(3, 5)), CallSpan(7, 9))
    [pair], dropped = collector.finish(100, [1] * 100)
    positive = read_sample_links(positive_fields([pair], dropped + 2))
    negative = read_sample_links(negative_fields(pair))
    assert not positive.negative and positive.dropped == 2
    assert [(link.pair_id, link.span) for link in positive.links] == [(pair.pair_id, CallSpan(7, 9))]
    assert negative.negative and [(link.pair_id, link.span) for link in negative.links] == [
        (pair.pair_id, CallSpan(3, 5))
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "save_negative_samples=True"),
        ({NEGATIVE_SAMPLE_KEY: "yes", NEGATIVE_LINKS_KEY: [], NEGATIVES_DROPPED_KEY: 0}, "true or false"),
        ({NEGATIVE_SAMPLE_KEY: True, NEGATIVE_LINKS_KEY: [], NEGATIVES_DROPPED_KEY: 0}, "exactly one link"),
        (
            {
                NEGATIVE_SAMPLE_KEY: False,
                NEGATIVE_LINKS_KEY: [{"id": "a", "start": 4, "end": 2}],
                NEGATIVES_DROPPED_KEY: 0,
            },
            "start < end",
        ),
        (
            {NEGATIVE_SAMPLE_KEY: False, NEGATIVE_LINKS_KEY: [{"id": "a"}], NEGATIVES_DROPPED_KEY: 0},
            "bad negative_links",
        ),
        ({NEGATIVE_SAMPLE_KEY: False, NEGATIVE_LINKS_KEY: "a", NEGATIVES_DROPPED_KEY: 0}, "list of links"),
        ({NEGATIVE_SAMPLE_KEY: False, NEGATIVE_LINKS_KEY: [], NEGATIVES_DROPPED_KEY: -1}, "integer >= 0"),
    ],
)
def test_malformed_fields_are_named(fields, message):
    with pytest.raises(NegativeFieldsError, match=message):
        read_sample_links(fields)


def test_collector_needs_a_positive_limit():
    with pytest.raises(ValueError, match="limit"):
        NegativeCollector(limit=0)
