"""rStar2-Agent's Resample-on-Correct (GRPO-RoC) selection of one prompt's oversampled rollouts.

The rule of rStar2-Agent's code (`down_sample/roc.py`): a group of N rollouts is cut to G; the correct and the
incorrect rollouts keep their shares (round(count x G / N)), each side at least its configured minimum when it has
that many; the correct ones kept are those with the lowest penalty (tool-error ratio + answer-format penalty,
ties in rollout order). The incorrect ones are drawn uniformly, as the paper describes (its code sorts them by the
same penalty). Rollouts that already train nothing (an infrastructure failure) are never chosen.
docs/purification.md lists every difference.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from cleaner.purify.turns import Turn

# rStar2-Agent's error ratio of a rollout without tool calls, and format penalty without a final answer.
NO_CALL_ERROR_RATIO = 0.5
NO_ANSWER_FORMAT_PENALTY = 1.0


@dataclass(frozen=True)
class RocCandidate:
    correct: bool
    penalty: float
    trained: bool = True  # False: its mask is already all zero (never kept)


def error_ratio(turns: Sequence[Turn]) -> float:
    """Failed calls / calls, per turn with a call (0.5 without a call, as rStar2-Agent)."""
    calls = [turn for turn in turns if turn.call or turn.failed]
    if not calls:
        return NO_CALL_ERROR_RATIO
    return sum(turn.failed for turn in calls) / len(calls)


def format_penalty(turns: Sequence[Turn]) -> float:
    """rStar2-Agent's answer-format penalty: 1 without an answer, else min((answers - 1) / turns, 1)."""
    answers = sum(turn.answer for turn in turns)
    if answers == 0 or not turns:
        return NO_ANSWER_FORMAT_PENALTY
    return min((answers - 1) / len(turns), 1.0)


def roc_penalty(turns: Sequence[Turn]) -> float:
    return error_ratio(turns) + format_penalty(turns)


def _side_counts(correct: int, incorrect: int, keep: int, min_correct: int, min_incorrect: int) -> tuple[int, int]:
    total = correct + incorrect
    keep_correct = round(correct * keep / total)  # Python's round, like the reference
    keep_incorrect = keep - keep_correct
    if keep_incorrect < min(min_incorrect, incorrect):
        keep_incorrect = min(min_incorrect, incorrect)
        keep_correct = keep - keep_incorrect
    if keep_correct < min(min_correct, correct):
        keep_correct = min(min_correct, correct)
        keep_incorrect = keep - keep_correct
    # Never more than a side has: the rest goes to the other side.
    keep_correct = min(keep_correct, correct)
    keep_incorrect = min(keep - keep_correct, incorrect)
    keep_correct = min(keep - keep_incorrect, correct)
    return keep_correct, keep_incorrect


def roc_select(
    candidates: Sequence[RocCandidate],
    *,
    keep: int,
    min_correct: int = 0,
    min_incorrect: int = 0,
    seed: int = 0,
    group: str = "",
) -> list[bool]:
    """Which of one prompt's rollouts stay (True) when its group is cut to `keep`.

    The draw of incorrect rollouts depends only on (`seed`, `group`), so a run is reproducible.
    """
    usable = [index for index, item in enumerate(candidates) if item.trained]
    if len(usable) <= keep:
        return [item.trained for item in candidates]
    correct = [index for index in usable if candidates[index].correct]
    incorrect = [index for index in usable if not candidates[index].correct]
    keep_correct, keep_incorrect = _side_counts(len(correct), len(incorrect), keep, min_correct, min_incorrect)
    cleanest = sorted(correct, key=lambda index: candidates[index].penalty)[:keep_correct]
    digest = hashlib.sha256(f"{seed}/{group}".encode()).digest()
    drawn = random.Random(int.from_bytes(digest[:8], "big")).sample(incorrect, keep_incorrect)
    chosen = set(cleanest) | set(drawn)
    return [index in chosen for index in range(len(candidates))]
