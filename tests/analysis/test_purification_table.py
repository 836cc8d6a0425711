"""The purification table: every mode on the same scripted groups, with hand-computed figures, and the
bootstrap interval over prompts."""

from __future__ import annotations

import pytest

from cleaner.analysis.bootstrap import Tally, estimate, resample_plan
from cleaner.analysis.purification_table import (
    PurificationTableError,
    purification_markdown,
    purification_table,
)
from cleaner.purify.config import Purification
from support.purification_records import off_group, on_group, paired_groups, record

# Per mode, on the groups of purification_records (4 samples: correct with a kept failed call, correct clean,
# wrong, wrong with a void turn), worked out by hand from the rules in cleaner/purify:
# (reinforced-error, penalized-success, trained share, dropped, generated per trained, off-policy, kept accuracy)
EXPECTED = {
    # positive tokens: samples 0 and 1 (16), 4 of them in sample 0's failed turn
    Purification.NONE: (4 / 16, 8 / 16, 32 / 40, 0.0, 40 / 32, 0.0, 2 / 4),
    # the failed call was rolled back: its turn (4 tokens) is spliced, and the resample cost 4 generated tokens
    Purification.SAAR: (0.0, 8 / 16, 32 / 44, 0.0, 44 / 32, 4 / 32, 2 / 4),
    # sample 0's failed turn masked: 28 tokens train, none of them on the failure
    Purification.ERROR_TURN_MASK: (0.0, 8 / 16, 28 / 40, 0.0, 40 / 28, 0.0, 2 / 4),
    # the void trajectory (wrong) dropped: both correct ones keep positive advantage, the failed turn with them
    Purification.VOID_TURN_FILTER: (4 / 16, 4 / 8, 24 / 40, 1 / 4, 40 / 24, 0.0, 2 / 3),
    # the trajectory with the failed call dropped
    Purification.ERROR_TRAJECTORY_FILTER: (0.0, 8 / 16, 24 / 40, 1 / 4, 40 / 24, 0.0, 1 / 3),
    # 2 of 4 kept: the clean correct one (lowest penalty) and one wrong one
    Purification.ROC: (0.0, 4 / 8, 16 / 40, 2 / 4, 40 / 16, 0.0, 1 / 2),
}
FIGURE_ORDER = (
    "reinforced_error_token_share",
    "penalized_success_token_share",
    "trained_token_share",
    "dropped_trajectory_share",
    "generated_tokens_per_trained_token",
    "offpolicy_token_share",
    "kept_accuracy",
)


def test_every_mode_on_the_same_groups():
    table = purification_table(paired_groups(5), resamples=200)
    assert [row.mode for row in table.rows] == list(EXPECTED)
    assert (table.group_size, table.roc_kept, table.skipped) == (4, 2, [])
    for row in table.rows:
        assert (row.prompts, row.trajectories) == (5, 20)
        values = tuple(row.estimates[name].value for name in FIGURE_ORDER)
        assert values == pytest.approx(EXPECTED[row.mode]), row.mode
        # Every prompt is the same group, so every bootstrap draw gives the point value.
        for name in FIGURE_ORDER:
            assert row.estimates[name].low == pytest.approx(row.estimates[name].value)
            assert row.estimates[name].high == pytest.approx(row.estimates[name].value)
    none = table.rows[0]
    assert none.estimates["reinforced_error_token_share"].size == 5 * 16  # positive-advantage trained tokens
    assert none.estimates["kept_accuracy"].size == 20  # kept trajectories
    assert table.generated_per_prompt == {True: 44.0, False: 40.0}


def test_intervals_cover_the_spread_between_prompts():
    # Half the prompts reinforce their failed call, half never fail: the share is 1/8 overall, and a draw of
    # prompts can give anything from 0 to 1/4.
    records = paired_groups(4)
    for index in range(4, 8):
        problem = f"p{index}"
        records += [record(problem, s, saar=False, correct=s < 2) for s in range(4)] + on_group(problem)
    none = purification_table(records, resamples=500).rows[0].estimates["reinforced_error_token_share"]
    assert none.value == pytest.approx(16 / 128)
    assert 0.0 <= none.low < none.value < none.high <= 0.25


def test_an_incomplete_group_is_left_out_and_said():
    records = paired_groups(4) + off_group("late")[:3] + on_group("late")
    table = purification_table(records, resamples=50)
    assert all(row.prompts == 4 for row in table.rows)
    assert table.skipped == ["1 prompt(s) without 4 samples in every SAAR mode"]
    assert "Not shown: 1 prompt(s) without 4 samples" in purification_markdown(table)


def test_one_saar_mode_gives_the_rows_it_can():
    off_only = purification_table([r for r in paired_groups(4) if not r["saar"]], resamples=50)
    assert Purification.SAAR not in [row.mode for row in off_only.rows]
    assert off_only.skipped == ["saar: no SAAR-on records"]
    on_only = purification_table([r for r in paired_groups(4) if r["saar"]], resamples=50)
    assert [row.mode for row in on_only.rows] == [Purification.SAAR]


def test_roc_needs_groups_it_can_halve():
    records = [r for r in paired_groups(4) if r["sample"] < 2]
    table = purification_table(records, resamples=50)
    assert Purification.ROC not in [row.mode for row in table.rows]
    assert table.skipped[0].startswith("roc: purification=roc keeps")


def test_records_without_turns_are_refused_by_key():
    records = paired_groups(4)
    del records[3]["purify_turns"]
    with pytest.raises(PurificationTableError, match="purify_turns.*p0#3#nosaar"):
        purification_table(records)


def test_markdown_gives_interval_and_sample_size():
    text = purification_markdown(purification_table(paired_groups(4), resamples=50))
    row = next(line for line in text.splitlines() if line.startswith("| `none`"))
    assert "25.0% [25.0%, 25.0%] (n = 64)" in row  # reinforced-error share of none
    assert "RoC trains 2 of them" in text and "bootstrap over prompts" in text


def test_bootstrap_ratio_of_sums():
    tallies = [Tally(1, 2), Tally(0, 2), Tally(3, 4), Tally(0, 0)]
    plan = resample_plan(4, 300, seed=1)
    result = estimate(tallies, plan)
    assert result.value == pytest.approx(4 / 8) and (result.size, result.prompts) == (8, 4)
    assert 0.0 <= result.low <= result.value <= result.high <= 0.75
    assert estimate(tallies, plan) == result  # same plan, same interval
    assert estimate(tallies[:3], resample_plan(3, 300)).low is None  # too few prompts for an interval
    assert estimate([Tally(0, 0)] * 4, plan).value is None  # nothing to divide by: not applicable
    with pytest.raises(ValueError, match="does not draw 5 prompts"):
        estimate([Tally(1, 1)] * 5, plan)


def test_roc_keeps_a_lone_correct_rollout():
    # 1 correct of 4: rStar2-Agent's share rule alone keeps round(1 x 2 / 4) = 0 correct; the floor keeps it.
    records = []
    for index in range(4):
        problem = f"p{index}"
        records += [record(problem, s, saar=False, correct=s == 0) for s in range(4)]
    [roc] = [row for row in purification_table(records, resamples=50).rows if row.mode is Purification.ROC]
    assert roc.estimates["kept_accuracy"].value == pytest.approx(1 / 2)
    assert roc.estimates["dropped_trajectory_share"].value == pytest.approx(1 / 2)
