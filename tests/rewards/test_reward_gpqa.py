"""GPQA-Diamond: the boxed choice letter, in every way models write it."""

from __future__ import annotations

import pytest

from cleaner.rewards import compute_score


def answer(boxed: str) -> str:
    return f"<think>\nThe options...\n</think>\n\nThe correct option is {boxed}"


@pytest.mark.parametrize(
    "boxed",
    [
        "\\boxed{B}",
        "\\boxed{(B)}",
        "\\boxed{B.}",
        "\\boxed{\\text{B}}",
        "\\boxed{\\text{(B)}}",
        "\\boxed{\\textbf{B}}",
        "\\boxed{B) 3.2 eV}",
        "\\boxed{\\mathrm{B}}",
        "$\\boxed{B}$",
        "\\boxed{ B }",
    ],
)
async def test_every_way_of_writing_the_right_letter_scores_plus_one(boxed):
    result = await compute_score("gpqa_diamond", answer(boxed), "B")
    assert (result["score"], result["acc"], result["pred"], result["reason"]) == (1.0, True, "B", "correct")


@pytest.mark.parametrize(
    "response, reason, pred",
    [
        (answer("\\boxed{C}"), "wrong_answer", "C"),
        (answer("\\boxed{\\text{(D)}}"), "wrong_answer", "D"),
        (answer("\\boxed{E}"), "unparsable", "E"),
        (answer("\\boxed{Both}"), "unparsable", "Both"),
        (answer("B"), "no_answer", ""),
        ("<think>\n\\boxed{B}", "no_answer", ""),
    ],
)
async def test_other_letters_and_non_letters_score_minus_one(response, reason, pred):
    result = await compute_score("gpqa_diamond", response, "B")
    assert (result["score"], result["acc"], result["pred"], result["reason"]) == (-1.0, False, pred, reason)


async def test_ground_truth_letter_may_be_written_with_parentheses():
    assert (await compute_score("gpqa_diamond", answer("\\boxed{A}"), "(A)"))["acc"]


async def test_a_ground_truth_that_names_no_letter_is_a_data_error():
    with pytest.raises(ValueError, match="gpqa_diamond.*letter A-D"):
        await compute_score("gpqa_diamond", answer("\\boxed{A}"), "42")
