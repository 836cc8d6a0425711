"""The batch (array) version of the modes gives what the per-record definition gives, on the same cases."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.masks import Trajectory, purify
from cleaner.purify.roc import RocCounts, roc_keep, roc_penalty
from cleaner.purify.turns import Turn, mask_runs
from cleaner.verl.purification_batch import mode_masks, roc_penalties, roc_selection


def random_row(rng: random.Random, width: int) -> tuple[list[int], list[Turn]]:
    """A response of `width` tokens: turns (mask 1) separated by tool outputs (mask 0), the last maybe cut."""
    mask, position = [0] * width, 0
    while position < width - 1:
        length = rng.randint(1, 6)
        mask[position : position + length] = [1] * min(length, width - position)
        position += length + rng.randint(1, 3)
    turns = [
        Turn(
            start,
            end,
            None,
            None,
            call=rng.random() < 0.7,
            answer=False,
            failed=rng.random() < 0.2,
            void=rng.random() < 0.1,
        )
        for start, end in mask_runs(mask)
    ]
    return mask, turns


def random_batch(seed: int, rows: int = 24, width: int = 40) -> list[Trajectory]:
    rng = random.Random(seed)
    batch = []
    for row in range(rows):
        mask, turns = random_row(rng, width)
        batch.append(Trajectory(f"g{row // 4}", float(rng.random() < 0.5), turns, mask))
    return batch


@pytest.mark.parametrize(
    "mode", [Purification.ERROR_TURN_MASK, Purification.ERROR_TRAJECTORY_FILTER, Purification.VOID_TURN_FILTER]
)
@pytest.mark.parametrize("seed", range(5))
def test_the_batch_masks_equal_the_definition(mode, seed):
    batch = random_batch(seed)
    config = PurificationConfig(purification=mode)
    expected = purify(config, batch)
    mask = torch.tensor([list(item.mask) for item in batch], dtype=torch.float32)
    change = mode_masks(config, mask, [[turn.to_dict() for turn in item.turns] for item in batch])
    before = change.before_advantages if change.before_advantages is not None else mask
    after = before.clone()
    if change.after_advantages is not None:
        after[change.after_advantages] = 0
    assert after.int().tolist() == expected.masks
    assert before.bool().any(dim=1).tolist() == expected.baseline


def random_counts(rng: random.Random) -> RocCounts:
    responses = rng.randint(0, 3)
    answers = rng.randint(0, 3)
    return RocCounts(
        tool_responses=responses,
        error_responses=rng.randint(0, responses),
        answer_opens=answers + (rng.random() < 0.2),
        answers=answers,
        assistant_turns=rng.randint(0, 3),
    )


@pytest.mark.parametrize("switches", [(True, True), (True, False), (False, True)])
def test_the_batch_penalties_equal_the_definition(switches):
    rng = random.Random(7)
    counts = [random_counts(rng) for _ in range(200)]
    config = PurificationConfig(
        purification=Purification.ROC, roc_error_ratio=switches[0], roc_answer_format=switches[1]
    )
    expected = [roc_penalty(item, use_error_ratio=switches[0], use_answer_format=switches[1]) for item in counts]
    assert roc_penalties([item.to_dict() for item in counts], config).tolist() == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(
    ("n", "oversampling", "minimums", "reject"), [(8, 2, (0, 0), True), (32, 2, (2, 2), True), (12, 3, (1, 2), False)]
)
def test_the_batch_roc_selection_equals_the_definition(seed, n, oversampling, minimums, reject):
    rng = random.Random(seed)
    groups = [f"p{row // n}" for row in range(6 * n)]
    rng.shuffle(groups)  # verl's rows need not be grouped
    share = {group: rng.random() for group in groups}
    rewards = [float(rng.random() < share[group]) for group in groups]
    penalties = [rng.choice([0.0, 0.5, 1.0, 1.5]) for _ in groups]  # ties: rollout order decides
    config = PurificationConfig(
        purification=Purification.ROC,
        roc_oversampling=oversampling,
        roc_min_correct=minimums[0],
        roc_min_incorrect=minimums[1],
        roc_reject_equal_reward=reject,
    )
    expected = roc_keep(
        groups,
        rewards,
        penalties,
        keep=n // oversampling,
        min_correct=minimums[0],
        min_incorrect=minimums[1],
        reject_equal_reward=reject,
    )
    selection = roc_selection(groups, np.array(rewards), np.array(penalties), config, n)
    assert selection.kept.tolist() == expected


def test_a_short_group_is_dropped_and_counted():
    config = PurificationConfig(purification=Purification.ROC, roc_reject_equal_reward=False)
    groups = ["a"] * 4 + ["b"]
    selection = roc_selection(groups, np.array([1.0, 0, 1, 0, 1]), np.zeros(5), config, 4)
    assert selection.kept.tolist() == [True, True, False, False, False]  # the cleanest correct, the first failure
    assert selection.short_groups == 1
