"""`multi_turn.purification`: which answer to the credit-assignment problem a run uses, and RoC's settings.

One key picks the mode; `saar` is the same as the older `enable_tool_rollback: true`, which keeps working
(unset `purification` follows it). The RoC keys follow rStar2-Agent's published recipe (docs/purification.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from cleaner.purify.roc import count_problems

SECTION = "actor_rollout_ref.rollout.multi_turn"


class Purification(StrEnum):
    NONE = "none"  # train every trajectory as sampled
    SAAR = "saar"  # CLEANER: roll failed calls back in the agent loop (enable_tool_rollback)
    ERROR_TURN_MASK = "error_turn_mask"  # mask the model tokens of every turn whose call failed
    VOID_TURN_FILTER = "void_turn_filter"  # SimpleTIR: a trajectory with a void turn trains nothing
    ERROR_TRAJECTORY_FILTER = "error_trajectory_filter"  # a trajectory that kept a failed call trains nothing
    ROC = "roc"  # rStar2-Agent's GRPO-RoC: oversample, keep the cleanest correct rollouts and the first failures


# Modes the trainer applies to the training batch (SAAR acts in the agent loop, none does nothing).
TRAINER_MODES = (
    Purification.ERROR_TURN_MASK,
    Purification.VOID_TURN_FILTER,
    Purification.ERROR_TRAJECTORY_FILTER,
    Purification.ROC,
)


class PurificationConfigError(ValueError):
    """A setting of `multi_turn.purification` (or RoC's keys) is invalid or contradicts another key."""


@dataclass(frozen=True)
class PurificationConfig:
    purification: Purification = Purification.NONE
    # RoC: rollout.n = roc_oversampling x the kept group size (rStar2-Agent: 32 rollouts cut to 16).
    roc_oversampling: int = 2
    # At least this many correct / incorrect rollouts stay in a cut group when the group has them
    # (rStar2-Agent's min_non_zero_reward_trace_num / min_zero_reward_trace_num; its script passes 2 and 2,
    # its yaml's -1 is this 0).
    roc_min_correct: int = 0
    roc_min_incorrect: int = 0
    # rStar2-Agent's reject_equal_reward, roc_error_ratio and roc_answer_format, as its training script sets them.
    roc_reject_equal_reward: bool = True  # a group whose rewards are all equal leaves the batch
    roc_error_ratio: bool = True  # the penalty counts the share of tool responses holding "error"
    roc_answer_format: bool = True  # the penalty counts the answer-format term

    def __post_init__(self) -> None:
        for key in ("roc_oversampling", "roc_min_correct", "roc_min_incorrect"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise PurificationConfigError(f"{SECTION}.{key} must be an integer, got {value!r}")
        for key in ("roc_reject_equal_reward", "roc_error_ratio", "roc_answer_format"):
            if not isinstance(getattr(self, key), bool):
                raise PurificationConfigError(f"{SECTION}.{key} must be true or false, got {getattr(self, key)!r}")
        if self.roc_oversampling < 1:
            raise PurificationConfigError(f"{SECTION}.roc_oversampling must be >= 1, got {self.roc_oversampling}")
        if self.roc_min_correct < 0 or self.roc_min_incorrect < 0:
            raise PurificationConfigError(f"{SECTION}.roc_min_correct and roc_min_incorrect must be >= 0")

    @property
    def mode(self) -> Purification:
        return self.purification

    @classmethod
    def from_multi_turn(cls, multi_turn: Mapping[str, Any] | None) -> PurificationConfig:
        """Read `multi_turn` (a DictConfig or dict). Unset `purification` is `saar` with `enable_tool_rollback`,
        else `none`; a set one must agree with `enable_tool_rollback`."""
        section = multi_turn or {}
        rollback = bool(section.get("enable_tool_rollback") or False)
        raw = section.get("purification")
        if raw is None:
            mode = Purification.SAAR if rollback else Purification.NONE
        else:
            try:
                mode = Purification(str(raw))
            except ValueError:
                choices = ", ".join(item.value for item in Purification)
                raise PurificationConfigError(f"{SECTION}.purification must be one of {choices}; got {raw!r}") from None
            if rollback and mode is not Purification.SAAR:
                raise PurificationConfigError(
                    f"{SECTION}.purification={mode.value} contradicts {SECTION}.enable_tool_rollback=true (SAAR is "
                    "the mode `saar`): drop enable_tool_rollback or set purification=saar"
                )
        values = {key: section[key] for key in ROC_KEYS if section.get(key) is not None}
        return cls(purification=mode, **values)

    def kept_group_size(self, rollout_n: int) -> int:
        """RoC: how many of a prompt's `rollout_n` rollouts form its GRPO group."""
        return rollout_n // self.roc_oversampling

    def roc_problems(self, rollout_n: int) -> list[str]:
        """What makes RoC unable to cut `rollout_n` rollouts per prompt into groups (empty: it can)."""
        ratio = self.roc_oversampling
        if ratio < 2:
            return [f"{SECTION}.roc_oversampling must be >= 2 with purification=roc (1 would keep every rollout)"]
        if rollout_n % ratio:
            return [
                f"actor_rollout_ref.rollout.n={rollout_n} must be a multiple of {SECTION}.roc_oversampling={ratio} "
                "with purification=roc (n = oversampling x the kept group size)"
            ]
        kept = rollout_n // ratio
        if kept < 2:
            return [
                f"purification=roc keeps actor_rollout_ref.rollout.n / roc_oversampling = {kept} rollout per prompt; "
                "a GRPO group needs at least 2: raise rollout.n"
            ]
        if self.roc_min_correct + self.roc_min_incorrect > kept:
            return [
                f"{SECTION}.roc_min_correct + roc_min_incorrect = {self.roc_min_correct + self.roc_min_incorrect} "
                f"exceeds the kept group size {kept} (rollout.n / roc_oversampling)"
            ]
        splits = count_problems(rollout_n, kept, self.roc_min_correct, self.roc_min_incorrect)
        if splits:
            return [
                f"purification=roc with actor_rollout_ref.rollout.n={rollout_n}, {SECTION}.roc_oversampling={ratio}, "
                f"roc_min_correct={self.roc_min_correct}, roc_min_incorrect={self.roc_min_incorrect}: rStar2-Agent's "
                f"rounded shares do not add up to the kept group size {kept} when {splits[0]} (its code asserts "
                "they do): change rollout.n or the minimums"
            ]
        return []


ROC_KEYS: tuple[str, ...] = tuple(spec.name for spec in fields(PurificationConfig) if spec.name != "purification")
# The multi_turn keys this package reads (verl's multi_turn schema must accept them).
CONFIG_KEYS: tuple[str, ...] = ("purification", *ROC_KEYS)


def saar_requested(multi_turn: Mapping[str, Any] | None) -> bool:
    """Whether the agent loop must run SAAR: `purification=saar` or `enable_tool_rollback: true`."""
    return PurificationConfig.from_multi_turn(multi_turn).mode is Purification.SAAR
