"""RoC as rStar2-Agent's code does it (`down_sample/roc.py`, `reject_sampling.py` of microsoft/rStar): the
penalties counted on the decoded response, equal-reward rejection, the kept shares, the cleanest correct
rollouts and the failures in rollout order."""

from __future__ import annotations

import pytest

from cleaner.purify.roc import (
    RocCountError,
    RocCounts,
    answer_format,
    count_problems,
    error_ratio,
    resample_of_correct,
    roc_counts,
    roc_keep,
    roc_penalty,
)

# Responses as the Qwen chat template decodes them with special tokens: the first turn's header is the prompt's
# generation prompt, every later turn opens with `<|im_start|>assistant`.
CALL = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "print(1)"}}\n</tool_call><|im_end|>'
NEXT = "\n<|im_start|>assistant\n"


def tool(output: str) -> str:
    return f"\n<|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>"


ONE_TURN_ANSWER = "<think>\nEasy.\n</think>\n\nThe total is \\boxed{55}.<|im_end|>"
CALL_THEN_ANSWER = "Let me run it.\n" + CALL + tool("55") + NEXT + "So \\boxed{55}.<|im_end|>"
FAILED_THEN_ANSWER = "Run.\n" + CALL + tool("NameError: name 'totl' is not defined") + NEXT + "\\boxed{55}<|im_end|>"


def test_a_one_turn_answer_without_a_tool_gets_the_no_response_ratio_and_the_full_format_penalty():
    counts = roc_counts(ONE_TURN_ANSWER)
    assert counts == RocCounts(tool_responses=0, error_responses=0, answer_opens=1, answers=1, assistant_turns=0)
    assert error_ratio(counts) == 0.5  # no tool response
    assert answer_format(counts) == 1.0  # no assistant header in the response: k - 1 = 0 turns
    assert roc_penalty(counts) == 1.5


def test_the_error_ratio_counts_tool_responses_that_say_error():
    assert roc_penalty(roc_counts(CALL_THEN_ANSWER)) == 0.0
    assert roc_penalty(roc_counts(FAILED_THEN_ANSWER)) == 1.0  # 1 of 1 responses, answer format 0
    half = "a" + CALL + tool("ERROR: timeout") + NEXT + "b" + CALL + tool("3") + NEXT + "\\boxed{3}<|im_end|>"
    assert error_ratio(roc_counts(half)) == 0.5


def test_the_answer_format_counts_answers_over_assistant_headers():
    two_answers = "\\boxed{1}" + CALL + tool("1") + NEXT + "x" + CALL + tool("2") + NEXT + "\\boxed{2}<|im_end|>"
    assert answer_format(roc_counts(two_answers)) == pytest.approx(1 / 2)  # (2 - 1) / 2 headers
    assert answer_format(roc_counts("x" + CALL + tool("1") + NEXT + "no answer<|im_end|>")) == 1.0
    unclosed = "x" + CALL + tool("1") + NEXT + "\\boxed{55<|im_end|>"
    assert answer_format(roc_counts(unclosed)) == 1.0  # open and closed counts differ
    cut = "x" + CALL + tool("1") + NEXT + "\\boxed{55} and more"  # the last turn has no end token
    assert answer_format(roc_counts(cut)) == 1.0


def test_the_penalty_terms_can_be_switched_off():
    counts = roc_counts(ONE_TURN_ANSWER)
    assert roc_penalty(counts, use_error_ratio=False) == 1.0
    assert roc_penalty(counts, use_answer_format=False) == 0.5


def test_correct_rollouts_are_kept_by_penalty_and_failures_in_rollout_order():
    rewards = [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    penalties = [0.0, 1.5, 9.0, 0.0, 0.1, 1.0, 5.0, 0.0]
    kept = resample_of_correct(rewards, penalties, keep=4)
    # 2 correct (the two with penalty 0, rows 3 and 7) and the first 2 failures (rows 0 and 2), whatever their
    # penalties (rStar stopped sorting failures by penalty)
    assert [row for row, stays in enumerate(kept) if stays] == [0, 2, 3, 7]


def test_a_side_below_its_minimum_is_raised_and_the_other_side_takes_the_rest():
    rewards = [0.0] * 7 + [1.0]
    # round(1 x 4 / 8) = 0 correct: raised to min(2, 1) = 1; the failures take the other 3
    kept = resample_of_correct(rewards, [0.0] * 8, keep=4, min_correct=2, min_incorrect=2)
    assert [row for row, stays in enumerate(kept) if stays] == [0, 1, 2, 7]
    assert sum(resample_of_correct(rewards, [0.0] * 8, keep=4)) == 4


def test_a_group_smaller_than_the_kept_size_is_dropped_and_one_of_that_size_kept_whole():
    assert resample_of_correct([1.0, 0.0, 0.0], [0.0] * 3, keep=4) == [False] * 3
    assert resample_of_correct([1.0, 0.0, 0.0, 0.0], [0.0] * 4, keep=4) == [True] * 4


def test_groups_whose_rewards_are_all_equal_leave_the_batch():
    groups = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    rewards = [1.0] * 4 + [0.0] * 4 + [1.0, 0.0, 0.0, 1.0]
    kept = roc_keep(groups, rewards, [0.0] * 12, keep=2)
    assert kept == [False] * 8 + [True, True, False, False]
    kept = roc_keep(groups, rewards, [0.0] * 12, keep=2, reject_equal_reward=False)
    assert kept[:8] == [True, True, False, False, True, True, False, False]


def test_counts_that_do_not_add_up_are_refused_as_rstar_asserts():
    # 6 rollouts cut to 3 with 3 correct: round(1.5) + round(1.5) = 4
    with pytest.raises(RocCountError, match="kept 4 of 6"):
        resample_of_correct([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0] * 6, keep=3)
    assert count_problems(6, 3, 0, 0) == ["3 correct of 6 keeps 4"]
    assert count_problems(32, 16, 2, 2) == []  # rStar's script
