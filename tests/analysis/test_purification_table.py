"""The purification table: every mode on the same scripted groups, with hand-computed figures, and the
bootstrap interval over prompts."""

from __future__ import annotations

import pytest

from cleaner.analysis.bootstrap import Tally, estimate, resample_plan
from cleaner.analysis.purification_table import (
    FAILED_CALL_FIGURES,
    FIGURES,
    PurificationTableError,
    purification_markdown,
    purification_table,
)
from cleaner.purify.turns import GENERATED_TOKENS_KEY
from support.purification_records import off_group, on_group, paired_groups, record

# Per setting, on the groups of purification_records (4 samples: correct with a kept failed call, correct clean,
# wrong, wrong with a void turn; SAAR on: sample 0's failed call rolled back and its turn spliced from a resample),
# worked out by hand from the rules in cleaner/purify:
# (reinforced-error, penalized-success, trained share, dropped, generated per trained, off-policy, kept accuracy)
EXPECTED = {
    # positive tokens: samples 0 and 1 (16), 4 of them in sample 0's failed turn
    "none": (4 / 16, 8 / 16, 32 / 40, 0.0, 40 / 32, 0.0, 2 / 4),
    # the failed call was rolled back: its turn (4 tokens) is spliced, and the resample cost 4 generated tokens
    "saar": (0.0, 8 / 16, 32 / 44, 0.0, 44 / 32, 4 / 32, 2 / 4),
    # the same trajectories; the negative sample is not a trajectory and trains only the rolled-back call
    "saar_negative_samples": (0.0, 8 / 16, 32 / 44, 0.0, 44 / 32, 4 / 32, 2 / 4),
    # sample 0's failed turn masked: 28 tokens train, none of them on the failure
    "error_turn_mask": (0.0, 8 / 16, 28 / 40, 0.0, 40 / 28, 0.0, 2 / 4),
    # the void trajectory (wrong) dropped: both correct ones keep positive advantage, the failed turn with them
    "void_turn_filter": (4 / 16, 4 / 8, 24 / 40, 1 / 4, 40 / 24, 0.0, 2 / 3),
    # the trajectory with the failed call dropped
    "error_trajectory_filter": (0.0, 8 / 16, 24 / 40, 1 / 4, 40 / 24, 0.0, 1 / 3),
    # 2 of 4 kept: the clean correct one (lowest penalty) and one wrong one
    "roc": (0.0, 4 / 8, 16 / 40, 2 / 4, 40 / 16, 0.0, 1 / 2),
}
# Of the 4 failed-call tokens each group generated (sample 0's failed turn, kept or rolled back):
# (reinforced, penalized, not trained, trained in their place); None where the rule removes them.
FAILED_CALLS = {
    "none": (1.0, 0.0, 0.0, 0.0),  # kept in a correct trajectory: positive advantage
    "saar": (0.0, 0.0, 1.0, 1.0),  # rolled back; its 4-token splice trains in its place
    "saar_negative_samples": (0.0, 2 / 4, 2 / 4, 1.0),  # the negative trains the call's 2 tokens, negatively
    "error_turn_mask": (None, None, 1.0, 0.0),
    "void_turn_filter": (1.0, 0.0, 0.0, 0.0),
    "error_trajectory_filter": (None, None, 1.0, 0.0),
    "roc": (0.0, 0.0, 1.0, 0.0),  # its trajectory is cut: a measured zero, RoC could have kept it
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
    assert [row.setting.name for row in table.rows] == list(EXPECTED)
    assert (table.group_size, table.roc_samples, table.roc_kept, table.skipped) == (4, 4, 2, [])
    for row in table.rows:
        assert (row.prompts, row.trajectories) == (5, 20)
        values = tuple(row.estimates[name].value for name in FIGURE_ORDER)
        assert values == pytest.approx(EXPECTED[row.setting.name]), row.setting.name
        # Every prompt is the same group, so every bootstrap draw gives the point value.
        for name in FIGURE_ORDER:
            assert row.estimates[name].low == pytest.approx(row.estimates[name].value)
            assert row.estimates[name].high == pytest.approx(row.estimates[name].value)
    none = table.rows[0]
    assert none.estimates["reinforced_error_token_share"].size == 5 * 16  # positive-advantage trained tokens
    assert none.estimates["kept_accuracy"].size == 20  # kept trajectories
    budget = {row.setting.name: row.estimates["generated_tokens_per_prompt"].value for row in table.rows}
    assert budget == {name: 44.0 if name.startswith("saar") else 40.0 for name in EXPECTED}


def test_failed_calls_are_counted_over_every_token_generated_and_removed_cells_say_so():
    table = purification_table(paired_groups(5), resamples=50)
    for row in table.rows:
        cells = [row.cell(figure) for figure in FAILED_CALL_FIGURES]
        expected = FAILED_CALLS[row.setting.name]
        for cell, figure, value in zip(cells, FAILED_CALL_FIGURES, expected, strict=True):
            if value is None:
                assert cell == "removed", (row.setting.name, figure.name)
            else:
                assert row.estimates[figure.name].value == pytest.approx(value), (row.setting.name, figure.name)
                assert row.estimates[figure.name].size == 5 * 4  # every mode: the same failed-call tokens
    removed = {row.setting.name: row.cell(FIGURES[-7]) for row in table.rows}  # the reinforced-error share
    assert removed["error_turn_mask"] == removed["error_trajectory_filter"] == "removed"
    assert removed["roc"].startswith("0.0% [0.0%, 0.0%]")  # measured: RoC's rule could keep a failed call


def test_roc_samples_as_many_rollouts_as_match_saars_tokens():
    # SAAR on spends 15 tokens per sample (60 per group of 4), SAAR off 10 per sample: 6 SAAR-off samples match.
    # rStar2-Agent's rounding cannot halve 6 (3 correct of 6 keeps 2 + 2), so RoC cuts the 6 to 2.
    records = []
    for index in range(4):
        problem = f"p{index}"
        on = [record(problem, s, saar=True, correct=s % 2 == 0, spliced=True) for s in range(4)]
        for one in on:
            one[GENERATED_TOKENS_KEY] = 15
        records += on + [record(problem, s, saar=False, correct=s % 2 == 0) for s in range(12)]
    table = purification_table(records, resamples=50)
    roc = table.rows[-1]
    assert (table.roc_samples, table.roc_kept, table.roc_matched) == (6, 2, True)
    assert (roc.sampled, roc.trained, roc.trajectories) == (6, 2, 24)
    assert roc.estimates["generated_tokens_per_prompt"].value == pytest.approx(60.0)
    assert table.rows[0].trajectories == 16  # the other modes train the first 4, paired with SAAR's
    assert "RoC samples 6 rollouts per prompt" in purification_markdown(table)
    assert "60 generated tokens per prompt against SAAR's 60, within ±10 %" in purification_markdown(table)


def test_families_give_the_tool_error_rate_and_the_reinforced_shares():
    records = paired_groups(2)
    for index in range(2, 4):  # two prompts that never fail
        problem = f"p{index}"
        records += [record(problem, s, saar=False, correct=s < 2) for s in range(4)] + on_group(problem)
    families = {"p0": "written-to-fail", "p1": "written-to-fail", "p2": "other", "p3": "other"}
    table = purification_table(records, resamples=50, families=families)
    by_family = {row.family: row for row in table.families}
    assert sorted(by_family) == ["other", "written-to-fail"]
    failing = by_family["written-to-fail"].estimates
    assert failing["tool_error_rate"].value == pytest.approx(1 / 4)  # 1 of each group's 4 calls failed
    assert failing["failing_trajectory_share"].value == pytest.approx(1 / 4)
    assert failing["reinforced_error_token_share"].value == pytest.approx(4 / 16)
    assert failing["failed_call_reinforced_share"].value == pytest.approx(1.0)
    clean = by_family["other"].estimates
    assert clean["tool_error_rate"].value == 0.0 and clean["failed_call_reinforced_share"].value is None
    assert "Per problem family" in purification_markdown(table)
    with pytest.raises(PurificationTableError, match="no family, e.g. p3"):
        purification_table(records, resamples=50, families={"p0": "a", "p1": "a", "p2": "b"})


def test_one_sample_per_prompt_says_how_to_get_groups():
    records = [r for r in paired_groups(4) if r["sample"] == 0]
    with pytest.raises(PurificationTableError, match=r"needs at least 2 samples .*make demo DEMO_ARGS=\"-n 4\""):
        purification_table(records)


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
    assert table.skipped == ["1 prompt(s) without complete groups in every SAAR mode"]
    assert "Not shown: 1 prompt(s) without complete groups" in purification_markdown(table)


def test_one_saar_mode_gives_the_rows_it_can():
    off_only = purification_table([r for r in paired_groups(4) if not r["saar"]], resamples=50)
    assert "saar" not in [row.setting.name for row in off_only.rows]
    assert off_only.skipped == ["saar: no SAAR-on records", "saar_negative_samples: no SAAR-on records"]
    assert off_only.roc_matched is None  # no SAAR budget to match: RoC samples every rollout there is
    on_only = purification_table([r for r in paired_groups(4) if r["saar"]], resamples=50)
    assert [row.setting.name for row in on_only.rows] == ["saar", "saar_negative_samples"]


def test_roc_needs_groups_it_can_halve():
    records = [r for r in paired_groups(4) if r["sample"] < 2]
    table = purification_table(records, resamples=50)
    assert "roc" not in [row.setting.name for row in table.rows]
    assert table.skipped[0].startswith("roc: purification=roc keeps")


def test_records_without_turns_are_refused_by_key():
    records = paired_groups(4)
    del records[3]["purify_turns"]
    with pytest.raises(PurificationTableError, match="purify_turns.*p0#3#nosaar"):
        purification_table(records)


def test_markdown_gives_interval_and_sample_size():
    text = purification_markdown(purification_table(paired_groups(4), resamples=50))
    failed_calls, trained = [line for line in text.splitlines() if line.startswith("| `none`")]
    assert "| 100.0% [100.0%, 100.0%] (n = 16) |" in failed_calls  # none reinforces every failed-call token
    assert "25.0% [25.0%, 25.0%] (n = 64)" in trained  # reinforced-error share of none
    assert "| `roc` | 4 (trains 2) | 40 [40, 40] (n = 4) |" in text  # rollouts per prompt, generated per prompt
    assert "RoC samples 4 rollouts per prompt" in text and "trains 2 of them" in text
    assert "bootstrap over prompts" in text


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
    [roc] = [row for row in purification_table(records, resamples=50).rows if row.setting.name == "roc"]
    assert roc.estimates["kept_accuracy"].value == pytest.approx(1 / 2)
    assert roc.estimates["dropped_trajectory_share"].value == pytest.approx(1 / 2)
