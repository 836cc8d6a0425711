"""The loss mask each mode leaves a trajectory, and the one function that applies a mode to a training batch.

Masks only ever go down: a token the loop masked (tool output, chat template, an infrastructure failure) stays
masked in every mode. A trajectory whose mask a mode zeroes is "dropped": it trains nothing and, through the
trainer's group statistics, leaves its group's mean and std (docs/purification.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.roc import RocCandidate, roc_penalty, roc_select
from cleaner.purify.turns import Turn


@dataclass(frozen=True)
class Trajectory:
    """What the rules need of one trajectory of a training batch."""

    group: str  # the prompt's group id (verl's `uid`)
    score: float  # its outcome reward; > 0 is correct, as in rStar2-Agent
    turns: Sequence[Turn]
    mask: Sequence[int]  # the loss (response) mask the loop built


def error_turn_mask(mask: Sequence[int], turns: Sequence[Turn]) -> list[int]:
    """Mask 0 on every model token of each turn that kept a failed call (its reasoning and its code)."""
    out = list(mask)
    for turn in turns:
        if turn.failed:
            out[turn.start : turn.end] = [0] * (min(turn.end, len(out)) - min(turn.start, len(out)))
    return out


def keeps_void_turn(turns: Sequence[Turn]) -> bool:
    return any(turn.void for turn in turns)


def keeps_failed_call(turns: Sequence[Turn]) -> bool:
    return any(turn.failed for turn in turns)


def trajectory_mask(mode: Purification, mask: Sequence[int], turns: Sequence[Turn]) -> list[int]:
    """The mask one trajectory trains with under `mode` (RoC decides per group: see `purified_masks`)."""
    if mode is Purification.ERROR_TURN_MASK:
        return error_turn_mask(mask, turns)
    if mode is Purification.VOID_TURN_FILTER and keeps_void_turn(turns):
        return [0] * len(mask)
    if mode is Purification.ERROR_TRAJECTORY_FILTER and keeps_failed_call(turns):
        return [0] * len(mask)
    return list(mask)


def purified_masks(config: PurificationConfig, batch: Sequence[Trajectory]) -> list[list[int]]:
    """The training mask of every trajectory of a batch under `config`'s mode, in batch order.

    RoC cuts each group to `len(group) // roc_oversampling` rollouts; the others get an all-zero mask.
    """
    mode = config.mode
    if mode is not Purification.ROC:
        return [trajectory_mask(mode, item.mask, item.turns) for item in batch]
    masks = [list(item.mask) for item in batch]
    groups: dict[str, list[int]] = {}
    for row, item in enumerate(batch):
        groups.setdefault(item.group, []).append(row)
    for group, rows in groups.items():
        candidates = [
            RocCandidate(correct=batch[row].score > 0, penalty=roc_penalty(batch[row].turns), trained=any(masks[row]))
            for row in rows
        ]
        kept = roc_select(
            candidates,
            keep=len(rows) // config.roc_oversampling,
            min_correct=config.roc_min_correct,
            min_incorrect=config.roc_min_incorrect,
            seed=config.roc_seed,
            group=group,
        )
        for row, keep in zip(rows, kept, strict=True):
            if not keep:
                masks[row] = [0] * len(masks[row])
    return masks
