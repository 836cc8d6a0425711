"""Math answers: the last `\\boxed{}` of the final turn, equivalent to the ground truth by math-verify (or strict)."""

from __future__ import annotations

import numbers
from typing import Any

from cleaner.rewards.config import RewardConfig
from cleaner.rewards.final_answer import final_turn, last_boxed
from cleaner.rewards.math_verify_pool import MathVerdict, shared_math_verify_pool
from cleaner.rewards.result import Reason, RewardResult

_VERDICT_REASONS = {
    MathVerdict.DIFFERENT: Reason.WRONG_ANSWER,
    MathVerdict.PRED_UNPARSABLE: Reason.UNPARSABLE,
    MathVerdict.TIMEOUT: Reason.TIMEOUT,
    MathVerdict.CRASHED: Reason.CHECKER_CRASHED,
}


def math_ground_truth(ground_truth: Any) -> str:
    """The gold answer as text; a gold stored as `\\boxed{...}` is unboxed."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, (str, numbers.Real)):
        kind = type(ground_truth).__name__
        raise ValueError(f"a math ground truth must be a string or a number, got {kind}: {ground_truth!r}")
    gold = str(ground_truth).strip()
    boxed = last_boxed(gold)
    gold = boxed if boxed is not None else gold
    if not gold:
        raise ValueError("the math ground truth is empty")
    return gold


def strictly_equal(pred: str, gold: str) -> bool:
    return pred.strip() == gold.strip()


async def score_math(solution_str: str, ground_truth: Any, config: RewardConfig) -> RewardResult:
    gold = math_ground_truth(ground_truth)
    pred = last_boxed(final_turn(solution_str))
    if not pred:
        return RewardResult.incorrect("", Reason.NO_ANSWER)
    if config.math_equivalence == "strict":
        return _strict_result(pred, gold)
    verdict = await shared_math_verify_pool(config.math_workers, config.math_timeout_s).check(gold, pred)
    if verdict is MathVerdict.EQUIVALENT:
        return RewardResult.correct(pred)
    if verdict is MathVerdict.GOLD_UNPARSABLE:
        # math-verify reads nothing from this gold (e.g. an empty `\text{}`): only the exact text can match it.
        return _strict_result(pred, gold)
    return RewardResult.incorrect(pred, _VERDICT_REASONS[verdict])


def _strict_result(pred: str, gold: str) -> RewardResult:
    return (
        RewardResult.correct(pred) if strictly_equal(pred, gold) else RewardResult.incorrect(pred, Reason.WRONG_ANSWER)
    )
