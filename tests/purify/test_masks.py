"""Each mode's mask on scripted trajectories, token for token."""

from __future__ import annotations

import pytest

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.masks import Trajectory, purified_masks, trajectory_mask
from cleaner.purify.turns import Turn

# A response of 12 tokens: a failed call turn [0, 4), tool output [4, 6), a good call turn [6, 9), tool output
# [9, 10), an answer turn [10, 12).
MASK = [1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1]
FAILED_CALL = Turn(0, 4, 2, 4, call=True, answer=False, failed=True)
GOOD_CALL = Turn(6, 9, 7, 9, call=True, answer=False, failed=False)
ANSWER = Turn(10, 12, None, None, call=False, answer=True, failed=False)
VOID = Turn(10, 12, None, None, call=False, answer=False, failed=False)
WITH_ERROR = [FAILED_CALL, GOOD_CALL, ANSWER]
CLEAN = [Turn(0, 4, 2, 4, call=True, answer=False, failed=False), GOOD_CALL, ANSWER]
ZERO = [0] * len(MASK)


@pytest.mark.parametrize("mode", [Purification.NONE, Purification.SAAR])
def test_none_and_saar_train_the_mask_the_loop_built(mode):
    assert trajectory_mask(mode, MASK, WITH_ERROR) == MASK


def test_error_turn_mask_zeroes_the_failed_turn_reasoning_and_code_only():
    assert trajectory_mask(Purification.ERROR_TURN_MASK, MASK, WITH_ERROR) == [0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1]
    assert trajectory_mask(Purification.ERROR_TURN_MASK, MASK, CLEAN) == MASK


def test_error_turn_mask_never_unmasks_a_token():
    infra_dropped = [0] * len(MASK)
    assert trajectory_mask(Purification.ERROR_TURN_MASK, infra_dropped, CLEAN) == infra_dropped


def test_void_turn_filter_drops_a_trajectory_with_a_void_turn():
    assert trajectory_mask(Purification.VOID_TURN_FILTER, MASK, [FAILED_CALL, GOOD_CALL, VOID]) == ZERO
    # a failed call is a complete code block: not void
    assert trajectory_mask(Purification.VOID_TURN_FILTER, MASK, WITH_ERROR) == MASK


def test_error_trajectory_filter_drops_any_trajectory_that_kept_a_failed_call():
    assert trajectory_mask(Purification.ERROR_TRAJECTORY_FILTER, MASK, WITH_ERROR) == ZERO
    assert trajectory_mask(Purification.ERROR_TRAJECTORY_FILTER, MASK, CLEAN) == MASK


def test_roc_cuts_each_group_to_its_share_and_keeps_the_cleanest_correct():
    config = PurificationConfig(purification=Purification.ROC, roc_oversampling=2)
    batch = [
        Trajectory("a", 1.0, WITH_ERROR, MASK),  # correct, one failed call of two: penalty 0.5 + 0
        Trajectory("a", 1.0, CLEAN, MASK),  # correct, clean: penalty 0 + 0
        Trajectory("a", 0.0, CLEAN, MASK),
        Trajectory("a", 0.0, CLEAN, MASK),
        Trajectory("b", 1.0, CLEAN, MASK),
        Trajectory("b", 1.0, CLEAN, MASK),
    ]
    masks = purified_masks(config, batch)
    # group a: 2 of 4 kept, one correct (the clean one) and one incorrect; group b: 1 of 2, the first clean one
    assert masks[0] == ZERO and masks[1] == MASK
    assert sorted(mask == MASK for mask in masks[2:4]) == [False, True]
    assert masks[4] == MASK and masks[5] == ZERO


def test_the_other_modes_act_per_trajectory_in_a_batch():
    config = PurificationConfig(purification=Purification.ERROR_TRAJECTORY_FILTER)
    batch = [Trajectory("a", 1.0, WITH_ERROR, MASK), Trajectory("a", 1.0, CLEAN, MASK)]
    assert purified_masks(config, batch) == [ZERO, MASK]
