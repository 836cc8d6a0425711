"""rStar2-Agent's GRPO-RoC, as its code does it: the penalty terms on the decoded response, equal-reward rejection
and Resample-on-Correct (microsoft/rStar, `rstar2_agent/down_sample/roc.py` and `reject_sampling.py`).

This is the definition, per record; `cleaner.verl.purification_batch` computes the same selection with array operations
over a training batch. docs/purification.md maps rStar's template onto ours and lists every difference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# rStar's penalty of a response without any tool response, and its answer-format penalty for a bad format.
NO_TOOL_RESPONSE_ERROR_RATIO = 0.5
BAD_FORMAT_PENALTY = 1.0

TOOL_RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
# An assistant turn with its header: the first turn's header is the prompt's generation prompt, so a response of
# k turns holds k - 1 of them (fewer when the last one was cut before its end token).
ASSISTANT_TURN = re.compile(r"<\|im_start\|>assistant.*?<\|im_end\|>", re.DOTALL)
# rStar's `<answer>` ... `</answer>` is the final answer of its template; ours is `\boxed{...}`.
ANSWER_OPEN = "\\boxed{"


@dataclass(frozen=True)
class RocCounts:
    """What rStar's penalties count in one decoded response (special tokens kept, as rStar decodes it)."""

    tool_responses: int  # `<tool_response>...</tool_response>` spans
    error_responses: int  # of them, those whose text contains "error" in any case
    answer_opens: int  # `\boxed{` marks (rStar: `<answer>` tags)
    answers: int  # of them, those closed by their matching brace (rStar: `<answer>...</answer>` pairs)
    assistant_turns: int  # `<|im_start|>assistant ... <|im_end|>` matches

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RocCounts:
        return cls(**{key: int(data[key]) for key in cls.__dataclass_fields__})


def closed_answers(text: str) -> tuple[int, int]:
    """(`\\boxed{` marks, those closed by their matching brace) in `text`."""
    opens = closed = 0
    start = text.find(ANSWER_OPEN)
    while start >= 0:
        opens += 1
        depth, index = 1, start + len(ANSWER_OPEN)
        while depth and index < len(text):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            index += 1
        closed += depth == 0
        start = text.find(ANSWER_OPEN, start + len(ANSWER_OPEN))
    return opens, closed


def roc_counts(response_text: str) -> RocCounts:
    """rStar's counts over one response's text, decoded with its special tokens."""
    spans = TOOL_RESPONSE.findall(response_text)
    opens, closed = closed_answers(response_text)
    return RocCounts(
        tool_responses=len(spans),
        error_responses=sum("error" in span.lower() for span in spans),
        answer_opens=opens,
        answers=closed,
        assistant_turns=len(ASSISTANT_TURN.findall(response_text)),
    )


def error_ratio(counts: RocCounts) -> float:
    """Tool responses holding "error" / tool responses; 0.5 without a tool response."""
    if counts.tool_responses == 0:
        return NO_TOOL_RESPONSE_ERROR_RATIO
    return counts.error_responses / counts.tool_responses


def answer_format(counts: RocCounts) -> float:
    """1 without an answer, with an unclosed one, or without an assistant header; else min((answers - 1) / turns, 1)."""
    if counts.answers == 0 or counts.answer_opens != counts.answers or counts.assistant_turns == 0:
        return BAD_FORMAT_PENALTY
    return min((counts.answers - 1) / counts.assistant_turns, 1.0)


def roc_penalty(counts: RocCounts, *, use_error_ratio: bool = True, use_answer_format: bool = True) -> float:
    """The sum of the enabled terms (rStar's `roc_error_ratio`, `roc_answer_format`)."""
    return use_error_ratio * error_ratio(counts) + use_answer_format * answer_format(counts)


class RocCountError(ValueError):
    """The kept counts of a group do not add up to the kept size (rStar's code asserts they do)."""


def all_equal(rewards: Sequence[float]) -> bool:
    """rStar's `torch.allclose(rewards[0], rewards)`: |first - r| <= 1e-8 + 1e-5 |r| for every reward r."""
    first = rewards[0]
    return all(abs(first - reward) <= 1e-8 + 1e-5 * abs(reward) for reward in rewards)


def side_counts(
    incorrect: int, correct: int, keep: int, min_correct: int, min_incorrect: int
) -> tuple[int, int] | None:
    """(incorrect, correct) rollouts a group of `incorrect + correct` keeps; None: it keeps every rollout."""
    total = incorrect + correct
    keep_incorrect = round(incorrect * keep / total)  # Python's round, half to even, as rStar
    keep_correct = round(correct * keep / total)
    if keep_incorrect < min_incorrect and keep_correct < min_correct:
        return None
    if keep_incorrect <= min(min_incorrect, incorrect):
        keep_incorrect = min(min_incorrect, incorrect)
        keep_correct = keep - keep_incorrect
    if keep_correct <= min(min_correct, correct):
        keep_correct = min(min_correct, correct)
        keep_incorrect = keep - keep_correct
    return keep_incorrect, keep_correct


def resample_of_correct(
    rewards: Sequence[float], penalties: Sequence[float], *, keep: int, min_correct: int = 0, min_incorrect: int = 0
) -> list[bool]:
    """Which rollouts of one group stay: none if it has fewer than `keep`, all if exactly `keep`; else the `keep`
    made of the lowest-penalty correct ones (reward > 0; ties in rollout order) and the first incorrect ones in
    rollout order, each side its share of `keep`, raised to its minimum when it has that many."""
    size = len(rewards)
    if size < keep:
        return [False] * size
    if size == keep:
        return [True] * size
    incorrect = [row for row in range(size) if rewards[row] <= 0]
    correct = sorted((row for row in range(size) if rewards[row] > 0), key=lambda row: penalties[row])
    counts = side_counts(len(incorrect), len(correct), keep, min_correct, min_incorrect)
    if counts is None:
        return [True] * size
    chosen = set(correct[: counts[1]]) | set(incorrect[: counts[0]])
    if len(chosen) != keep:
        raise RocCountError(
            f"RoC kept {len(chosen)} of {size} rollouts ({len(correct)} correct) instead of {keep}: "
            f"min_correct={min_correct}, min_incorrect={min_incorrect}"
        )
    return [row in chosen for row in range(size)]


def count_problems(group_size: int, keep: int, min_correct: int, min_incorrect: int) -> list[str]:
    """The splits of a full group of `group_size` whose kept counts do not add up to `keep` (rStar asserts)."""
    problems = []
    for correct in range(group_size + 1):
        counts = side_counts(group_size - correct, correct, keep, min_correct, min_incorrect)
        if counts is None:
            continue
        kept = min(counts[0], group_size - correct) + min(max(counts[1], 0), correct)
        if kept != keep:
            problems.append(f"{correct} correct of {group_size} keeps {kept}")
    return problems


def roc_keep(
    groups: Sequence[str],
    rewards: Sequence[float],
    penalties: Sequence[float],
    *,
    keep: int,
    min_correct: int = 0,
    min_incorrect: int = 0,
    reject_equal_reward: bool = True,
) -> list[bool]:
    """Which rows of a batch RoC keeps: groups whose rewards are all equal leave first (with
    `reject_equal_reward`), then each remaining group is cut by `resample_of_correct`."""
    rows_of: dict[str, list[int]] = {}
    for row, group in enumerate(groups):
        rows_of.setdefault(group, []).append(row)
    kept = [False] * len(groups)
    for rows in rows_of.values():
        group_rewards = [rewards[row] for row in rows]
        if reject_equal_reward and all_equal(group_rewards):
            continue
        chosen = resample_of_correct(
            group_rewards,
            [penalties[row] for row in rows],
            keep=keep,
            min_correct=min_correct,
            min_incorrect=min_incorrect,
        )
        for row, stays in zip(rows, chosen, strict=True):
            kept[row] = stays
    return kept
