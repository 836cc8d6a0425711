"""What each mode does to a batch, per trajectory: the loss mask it trains with, whether its reward stays in its
group's GRPO baseline, and whether it stays in the batch at all. The definition and the test oracle of the
trainer's array version (`cleaner.verl.purification_batch`).

Masks only ever go down: a token the loop masked (tool output, chat template, an infrastructure failure) stays
masked in every mode. Three ways a mode takes a trajectory out of training (docs/purification.md):

- *dropped* (`error_trajectory_filter`, and a mask a mode zeroes entirely): mask 0 and out of its group's mean and
  std (`cleaner.verl.group_statistics`), as an infrastructure failure;
- *loss-masked* (`void_turn_filter`): mask 0 but its reward stays in its group's baseline, as SimpleTIR computes
  advantages over every row and multiplies only the loss mask by its void-turn mask;
- *removed* (`roc`): out of the batch before the actor sees it, as rStar2-Agent filters its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.roc import RocCounts, roc_keep, roc_penalty
from cleaner.purify.turns import Turn


@dataclass(frozen=True)
class Trajectory:
    """What the rules need of one trajectory of a training batch."""

    group: str  # the prompt's group id (verl's `uid`)
    score: float  # its outcome reward; > 0 is correct, as in rStar2-Agent
    turns: Sequence[Turn]
    mask: Sequence[int]  # the loss (response) mask the loop built
    roc: RocCounts | None = None  # rStar's counts on its response text (RoC only)


@dataclass(frozen=True)
class PurifiedBatch:
    masks: list[list[int]]  # the loss mask each trajectory trains with (all zero when removed)
    baseline: list[bool]  # its reward counts in its group's GRPO mean and std
    kept: list[bool]  # it stays in the batch (False: RoC removed it)


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
    """The mask one trajectory trains with under `mode` (RoC decides per group: see `purify`)."""
    if mode is Purification.ERROR_TURN_MASK:
        return error_turn_mask(mask, turns)
    if mode is Purification.VOID_TURN_FILTER and keeps_void_turn(turns):
        return [0] * len(mask)
    if mode is Purification.ERROR_TRAJECTORY_FILTER and keeps_failed_call(turns):
        return [0] * len(mask)
    return list(mask)


def roc_counts_of(item: Trajectory) -> RocCounts:
    if item.roc is None:
        raise ValueError(f"purification=roc needs rStar's counts of every trajectory (group {item.group!r} has none)")
    return item.roc


def group_sizes(groups: Sequence[str]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    return sizes


def purify(config: PurificationConfig, batch: Sequence[Trajectory], rollout_n: int | None = None) -> PurifiedBatch:
    """What `config`'s mode does to every trajectory of a batch, in batch order. RoC cuts each group to
    `rollout_n // roc_oversampling` rollouts (`rollout_n`: the rollouts sampled per prompt; default the largest
    group of the batch)."""
    mode = config.mode
    if mode is Purification.ROC:
        sampled = rollout_n or max(group_sizes([item.group for item in batch]).values(), default=0)
        kept = roc_keep(
            [item.group for item in batch],
            [item.score for item in batch],
            [
                roc_penalty(
                    roc_counts_of(item),
                    use_error_ratio=config.roc_error_ratio,
                    use_answer_format=config.roc_answer_format,
                )
                for item in batch
            ],
            keep=config.kept_group_size(sampled),
            min_correct=config.roc_min_correct,
            min_incorrect=config.roc_min_incorrect,
            reject_equal_reward=config.roc_reject_equal_reward,
        )
        masks = [list(item.mask) if stays else [0] * len(item.mask) for item, stays in zip(batch, kept, strict=True)]
        return PurifiedBatch(masks=masks, baseline=[any(mask) for mask in masks], kept=kept)
    masks = [trajectory_mask(mode, item.mask, item.turns) for item in batch]
    # A void trajectory keeps its reward in the baseline: only its loss is masked.
    in_baseline = [item.mask if mode is Purification.VOID_TURN_FILTER else mask for item, mask in zip(batch, masks)]
    return PurifiedBatch(masks=masks, baseline=[any(mask) for mask in in_baseline], kept=[True] * len(batch))


def purified_masks(
    config: PurificationConfig, batch: Sequence[Trajectory], rollout_n: int | None = None
) -> list[list[int]]:
    """The training mask of every trajectory of a batch under `config`'s mode, in batch order."""
    return purify(config, batch, rollout_n).masks
