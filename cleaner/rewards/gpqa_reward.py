"""Multiple-choice answers (GPQA-Diamond): the choice letter A-D in the last `\\boxed{}` of the final turn."""

from __future__ import annotations

import re
from typing import Any

from cleaner.rewards.final_answer import final_turn, last_boxed
from cleaner.rewards.result import Reason, RewardResult

# `\text{B}`, `\textbf{(B)}`, `\mathrm{B}` ... are unwrapped to their content before the letter is read.
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
# The letter, optionally in parentheses, then the end or a separator before the option's text: "B", "(B)",
# "B.", "B) 3.2 eV", "B: ...".
_CHOICE = re.compile(r"^\(?([A-D])\)?(?:[.:)]|\s|$)")


def choice_letter(answer: str) -> str | None:
    """The choice letter an answer names, or None when it names none."""
    text = answer
    while True:
        unwrapped = _LATEX_WRAPPER.sub(r"\1", text)
        if unwrapped == text:
            break
        text = unwrapped
    text = text.replace("$", "").strip()
    match = _CHOICE.match(text)
    return match.group(1) if match else None


def gpqa_ground_truth(ground_truth: Any) -> str:
    letter = choice_letter(ground_truth) if isinstance(ground_truth, str) else None
    if letter is None:
        raise ValueError(f"a multiple-choice ground truth must name a letter A-D, got {ground_truth!r}")
    return letter


async def score_gpqa(solution_str: str, ground_truth: Any) -> RewardResult:
    gold = gpqa_ground_truth(ground_truth)
    boxed = last_boxed(final_turn(solution_str))
    if not boxed:
        return RewardResult.incorrect("", Reason.NO_ANSWER)
    letter = choice_letter(boxed)
    if letter is None:
        return RewardResult.incorrect(boxed, Reason.UNPARSABLE)
    return RewardResult.correct(letter) if letter == gold else RewardResult.incorrect(letter, Reason.WRONG_ANSWER)
