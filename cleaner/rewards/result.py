"""The dict every reward returns: one fixed schema for every data source.

verl turns each key into a `reward_extra_info` column and concatenates batches that mix math, GPQA and code
rows, so every result carries every key with the same type.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

CORRECT_SCORE = 1.0
INCORRECT_SCORE = -1.0


class Reason(str, Enum):
    """Why a response got the score it got."""

    CORRECT = "correct"
    WRONG_ANSWER = "wrong_answer"  # an answer was found and judged, and it is wrong
    NO_ANSWER = "no_answer"  # no `\boxed{}` / no ```python block in the final turn
    UNPARSABLE = "unparsable"  # the answer is there but cannot be read (not a choice letter, code not Python)
    TIMEOUT = "timeout"  # checking the answer hit its time limit
    CHECKER_CRASHED = "checker_crashed"  # the math-verify process died while checking this answer
    TESTS_FAILED = "tests_failed"  # code ran against the hidden tests and at least one failed
    JUDGE_UNAVAILABLE = "judge_unavailable"  # infrastructure error: the code could not be judged


@dataclass(frozen=True)
class RewardResult:
    score: float
    acc: bool  # fully correct: DAPO `filter_groups` and pass@k read this
    pred: str  # the extracted answer (the code for code rows); verl's maj@n votes on it
    reason: Reason
    infra_error: bool = False  # True when the score says nothing about the response (judge outage)
    tests_passed: int = 0
    tests_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["reason"] = self.reason.value
        return data

    @classmethod
    def correct(cls, pred: str) -> RewardResult:
        return cls(CORRECT_SCORE, True, pred, Reason.CORRECT)

    @classmethod
    def incorrect(cls, pred: str, reason: Reason) -> RewardResult:
        return cls(INCORRECT_SCORE, False, pred, reason)
