"""The purification modes on a whole training batch at once: array operations over rows and tokens.

`cleaner.purify.masks` and `cleaner.purify.roc` define the rules per trajectory; this module computes the same
results for a batch of padded masks (rows x response tokens) without a Python loop over tokens. The only Python
over rows reads each row's per-turn and RoC records (a few numbers per turn). tests/verl/test_purification_batch.py
checks it against the per-record definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.roc import (
    BAD_FORMAT_PENALTY,
    NO_TOOL_RESPONSE_ERROR_RATIO,
    RocCountError,
    RocCounts,
)

Turns = Sequence[Mapping[str, Any]] | None  # one row's `purify_turns` value


def turn_flag_rows(turns: Sequence[Turns], flag: str) -> torch.Tensor:
    """Per row: whether any of its turns has `flag` set ("failed", "void")."""
    return torch.tensor([any(turn[flag] for turn in row or ()) for row in turns], dtype=torch.bool)


def failed_turn_spans(turns: Sequence[Turns]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, starts, ends) of every turn that kept a failed call."""
    spans = [
        (row, turn["start"], turn["end"]) for row, items in enumerate(turns) for turn in items or () if turn["failed"]
    ]
    if not spans:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty, empty
    rows, starts, ends = torch.tensor(spans, dtype=torch.long).unbind(1)
    return rows, starts, ends


def zero_spans(mask: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """`mask` (rows x tokens, changed in place and returned) with `[start, end)` of each listed row set to 0: one
    slice fill per span (a few per row), never a pass over the whole batch."""
    for row, start, end in zip(rows.tolist(), starts.tolist(), ends.tolist(), strict=True):
        mask[row, start:end] = 0
    return mask


def zero_rows(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """`tensor` (rows x tokens, changed in place and returned) with the flagged rows set to 0."""
    index = torch.nonzero(rows).flatten().to(tensor.device)
    if len(index):
        tensor[index] = 0
    return tensor


def roc_penalties(counts: Sequence[Mapping[str, Any] | None], config: PurificationConfig) -> np.ndarray:
    """rStar's penalty of each row from its `purify_roc_counts` record."""
    missing = [row for row, item in enumerate(counts) if item is None]
    if missing:
        raise ValueError(
            f"purification=roc needs rStar's counts (purify_roc_counts) of every row; row {missing[0]} has none "
            "(a trajectory of another agent loop?)"
        )
    fields = list(RocCounts.__dataclass_fields__)
    table = np.array([[item[name] for name in fields] for item in counts], dtype=np.float64).reshape(-1, len(fields))
    responses, errors, opens, answers, turns = table.T
    error_ratio = np.where(responses > 0, errors / np.maximum(responses, 1), NO_TOOL_RESPONSE_ERROR_RATIO)
    bad = (answers == 0) | (opens != answers) | (turns == 0)
    answer_format = np.where(bad, BAD_FORMAT_PENALTY, np.minimum((answers - 1) / np.maximum(turns, 1), 1.0))
    return config.roc_error_ratio * error_ratio + config.roc_answer_format * answer_format


@dataclass(frozen=True)
class RocSelection:
    kept: np.ndarray  # bool per row
    rejected_groups: int  # groups whose rewards were all equal (reject_equal_reward)
    short_groups: int  # groups with fewer rows than the kept size


def roc_selection(
    groups: Sequence[Any], rewards: np.ndarray, penalties: np.ndarray, config: PurificationConfig, rollout_n: int
) -> RocSelection:
    """`cleaner.purify.roc.roc_keep` over a batch, with array operations."""
    keep = config.kept_group_size(rollout_n)
    rows = len(rewards)
    if rows == 0:
        return RocSelection(np.zeros(0, dtype=bool), 0, 0)
    _, first, group = np.unique(np.asarray([str(item) for item in groups]), return_index=True, return_inverse=True)
    size = np.bincount(group)
    # rStar's torch.allclose(rewards[0], rewards) per group
    close = np.abs(rewards[first][group] - rewards) <= 1e-8 + 1e-5 * np.abs(rewards)
    equal = np.bincount(group, weights=(~close).astype(np.float64), minlength=len(size)) == 0
    correct = rewards > 0
    n_correct = np.bincount(group, weights=correct.astype(np.float64), minlength=len(size)).astype(np.int64)
    n_incorrect = size - n_correct
    take_incorrect = np.rint(n_incorrect * keep / size).astype(np.int64)  # half to even, as Python's round
    take_correct = np.rint(n_correct * keep / size).astype(np.int64)
    whole = (take_incorrect < config.roc_min_incorrect) & (take_correct < config.roc_min_correct)
    raise_incorrect = take_incorrect <= np.minimum(config.roc_min_incorrect, n_incorrect)
    take_incorrect = np.where(raise_incorrect, np.minimum(config.roc_min_incorrect, n_incorrect), take_incorrect)
    take_correct = np.where(raise_incorrect, keep - take_incorrect, take_correct)
    raise_correct = take_correct <= np.minimum(config.roc_min_correct, n_correct)
    take_correct = np.where(raise_correct, np.minimum(config.roc_min_correct, n_correct), take_correct)
    take_incorrect = np.where(raise_correct, keep - take_correct, take_incorrect)
    # Rank inside (group, side): correct rows by penalty, incorrect ones by position; ties by position.
    index = np.arange(rows)
    order = np.lexsort((index, np.where(correct, penalties, 0.0), correct, group))
    block = group[order] * 2 + correct[order]
    starts = np.r_[0, np.flatnonzero(np.diff(block)) + 1]
    rank = np.empty(rows, dtype=np.int64)
    rank[order] = index - np.repeat(starts, np.diff(np.r_[starts, rows]))
    chosen = np.where(correct, rank < take_correct[group], rank < take_incorrect[group])
    cut = (size > keep) & ~whole
    counted = np.bincount(group, weights=chosen.astype(np.float64), minlength=len(size))
    wrong = np.flatnonzero(cut & ~(config.roc_reject_equal_reward & equal) & (counted != keep))
    if len(wrong):
        raise RocCountError(
            f"RoC kept {int(counted[wrong[0]])} of {int(size[wrong[0]])} rollouts instead of {keep}: "
            f"min_correct={config.roc_min_correct}, min_incorrect={config.roc_min_incorrect}"
        )
    kept = np.where(cut[group], chosen, size[group] >= keep)
    rejected = equal if config.roc_reject_equal_reward else np.zeros_like(equal)
    kept &= ~rejected[group]
    return RocSelection(kept=kept, rejected_groups=int(rejected.sum()), short_groups=int((size < keep).sum()))


@dataclass(frozen=True)
class MaskChange:
    before_advantages: torch.Tensor | None  # the mask verl's estimator sees (None: unchanged)
    after_advantages: torch.Tensor | None  # rows whose loss mask (and advantages) go to 0 after it (None: none)


def mode_masks(config: PurificationConfig, mask: torch.Tensor, turns: Sequence[Turns]) -> MaskChange:
    """What a masking mode does to a padded `mask` (rows x tokens, changed in place): the mask before the
    advantages (dropped rows and masked turns leave the group statistics) and the rows loss-masked after them (void
    rows stay in the baseline, as SimpleTIR). RoC acts on the batch's rows, not on masks (`roc_selection`)."""
    mode = config.mode
    if mode is Purification.ERROR_TURN_MASK:
        return MaskChange(zero_spans(mask, *failed_turn_spans(turns)), None)
    if mode is Purification.ERROR_TRAJECTORY_FILTER:
        return MaskChange(zero_rows(mask, turn_flag_rows(turns, "failed")), None)
    if mode is Purification.VOID_TURN_FILTER:
        return MaskChange(None, turn_flag_rows(turns, "void"))
    return MaskChange(None, None)
