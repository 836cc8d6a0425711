"""RoC's selection: rStar2-Agent's counts and penalties, a uniform reproducible draw of failures."""

from __future__ import annotations

from cleaner.purify.roc import RocCandidate, error_ratio, format_penalty, roc_penalty, roc_select
from cleaner.purify.turns import Turn


def call(failed: bool) -> Turn:
    return Turn(0, 1, 0, 1, call=True, answer=False, failed=failed)


ANSWER = Turn(0, 1, None, None, call=False, answer=True, failed=False)


def test_penalties_follow_rstar2_agent():
    assert error_ratio([call(True), call(False), ANSWER]) == 0.5
    assert error_ratio([ANSWER]) == 0.5  # no tool call at all
    assert error_ratio([call(False), ANSWER]) == 0.0
    assert format_penalty([call(False)]) == 1.0  # no answer
    assert format_penalty([call(False), ANSWER]) == 0.0
    assert format_penalty([ANSWER, call(False), ANSWER]) == 1 / 3  # (answers - 1) / turns
    assert roc_penalty([call(True), ANSWER]) == 1.0


def test_keeps_the_shares_and_the_lowest_penalty_correct():
    correct = [RocCandidate(True, penalty) for penalty in (0.9, 0.1, 0.5, 0.1)]
    incorrect = [RocCandidate(False, 0.0) for _ in range(4)]
    kept = roc_select(correct + incorrect, keep=4)
    assert kept[:4] == [False, True, False, True]  # the two cleanest; a tie keeps rollout order
    assert sum(kept[4:]) == 2


def test_minimums_raise_a_side_when_it_has_enough():
    group = [RocCandidate(True, 0.0)] + [RocCandidate(False, 0.0) for _ in range(7)]
    assert sum(roc_select(group, keep=4)[:1]) == 0  # round(1 x 4 / 8) = 0 correct
    assert roc_select(group, keep=4, min_correct=1)[0] is True
    assert sum(roc_select(group, keep=4, min_correct=1)) == 4


def test_the_failure_draw_is_uniform_and_reproducible():
    group = [RocCandidate(False, float(index)) for index in range(8)]
    first = roc_select(group, keep=4, seed=3, group="p1")
    assert first == roc_select(group, keep=4, seed=3, group="p1")
    draws = {tuple(roc_select(group, keep=4, seed=seed, group="p1")) for seed in range(40)}
    assert len(draws) > 10  # not the lowest-penalty four every time
    kept_counts = [
        sum(draw[index] for draw in (roc_select(group, keep=4, seed=s) for s in range(400))) for index in range(8)
    ]
    assert all(150 < count < 250 for count in kept_counts)  # each failure kept about half the time


def test_rollouts_that_train_nothing_are_never_kept():
    group = [RocCandidate(True, 0.0, trained=False), RocCandidate(True, 1.0), RocCandidate(True, 2.0)]
    group.append(RocCandidate(False, 0.0))
    # shares among the 3 usable: round(2 x 2 / 3) = 1 correct (the cleanest usable one), 1 incorrect
    assert roc_select(group, keep=2) == [False, True, False, True]
    assert roc_select(group, keep=3) == [False, True, True, True]  # no more usable than keep: all usable stay
