"""Each mode's mask on scripted trajectories, token for token, and which rows stay in the baseline and the batch."""

from __future__ import annotations

import pytest

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.masks import Trajectory, purified_masks, purify, trajectory_mask
from cleaner.purify.roc import RocCounts
from cleaner.purify.turns import Turn

# A response of 12 tokens: a failed call turn [0, 4), tool output [4, 6), a good call turn [6, 9), tool output
# [9, 10), an answer turn [10, 12).
MASK = [1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1]
FAILED_CALL = Turn(0, 4, 2, 4, call=True, answer=False, failed=True)
GOOD_CALL = Turn(6, 9, 7, 9, call=True, answer=False, failed=False)
ANSWER = Turn(10, 12, None, None, call=False, answer=True, failed=False)
VOID = Turn(10, 12, None, None, call=False, answer=False, failed=False, void=True)
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


def test_void_trajectories_leave_the_loss_but_stay_in_their_groups_baseline():
    config = PurificationConfig(purification=Purification.VOID_TURN_FILTER)
    batch = [
        Trajectory("a", 1.0, CLEAN, MASK),
        Trajectory("a", 1.0, CLEAN, MASK),
        Trajectory("a", 0.0, [FAILED_CALL, GOOD_CALL, VOID], MASK),
        Trajectory("a", 0.0, [FAILED_CALL, VOID], MASK),
    ]
    purified = purify(config, batch)
    assert purified.masks == [MASK, MASK, ZERO, ZERO]
    assert purified.baseline == [True] * 4  # SimpleTIR: advantages over every row
    assert purified.kept == [True] * 4


def test_a_filtered_trajectory_is_dropped_from_its_baseline():
    config = PurificationConfig(purification=Purification.ERROR_TRAJECTORY_FILTER)
    purified = purify(config, [Trajectory("a", 1.0, WITH_ERROR, MASK), Trajectory("a", 0.0, CLEAN, MASK)])
    assert purified.baseline == [False, True]


# rStar's counts: a clean call then an answer (penalty 0), a failed call then an answer (1.0), a one-turn answer
# without a tool (1.5).
CLEAN_COUNTS = RocCounts(tool_responses=1, error_responses=0, answer_opens=1, answers=1, assistant_turns=1)
ERROR_COUNTS = RocCounts(tool_responses=1, error_responses=1, answer_opens=1, answers=1, assistant_turns=1)
ONE_TURN_COUNTS = RocCounts(tool_responses=0, error_responses=0, answer_opens=1, answers=1, assistant_turns=0)


def test_roc_removes_the_cut_rollouts_and_the_equal_reward_groups():
    config = PurificationConfig(purification=Purification.ROC, roc_oversampling=2)
    batch = [
        Trajectory("a", 1.0, WITH_ERROR, MASK, ERROR_COUNTS),
        Trajectory("a", 1.0, CLEAN, MASK, ONE_TURN_COUNTS),
        Trajectory("a", 1.0, CLEAN, MASK, CLEAN_COUNTS),
        Trajectory("a", 0.0, CLEAN, MASK, CLEAN_COUNTS),
        Trajectory("b", 1.0, CLEAN, MASK, CLEAN_COUNTS),
        Trajectory("b", 1.0, CLEAN, MASK, CLEAN_COUNTS),
        Trajectory("b", 1.0, CLEAN, MASK, CLEAN_COUNTS),
        Trajectory("b", 1.0, CLEAN, MASK, CLEAN_COUNTS),
    ]
    purified = purify(config, batch)
    # group a keeps 2 of 4: round(3 x 2 / 4) = 2 correct, the cleanest (penalty 0, then 1.0; the one-turn answer's
    # 1.5 ranks last), round(1 x 2 / 4) = 0 failures; group b (all correct) is rejected
    assert purified.kept == [True, False, True, False] + [False] * 4
    assert purified.masks == [MASK, ZERO, MASK, ZERO] + [ZERO] * 4


def test_roc_needs_rstars_counts():
    config = PurificationConfig(purification=Purification.ROC, roc_oversampling=2)
    with pytest.raises(ValueError, match="needs rStar's counts"):
        purify(config, [Trajectory("a", 1.0, CLEAN, MASK), Trajectory("a", 0.0, CLEAN, MASK)])


def test_the_other_modes_act_per_trajectory_in_a_batch():
    config = PurificationConfig(purification=Purification.ERROR_TRAJECTORY_FILTER)
    batch = [Trajectory("a", 1.0, WITH_ERROR, MASK), Trajectory("a", 1.0, CLEAN, MASK)]
    assert purified_masks(config, batch) == [ZERO, MASK]
