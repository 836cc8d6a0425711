"""The report's comparisons: SAAR on vs off paired with intervals, and the purification modes on the groups."""

from __future__ import annotations

import re

import pytest
from report_records import make_record

from cleaner.analysis.purification_table import TRAINING_FIGURES
from cleaner.report.page import render_report


@pytest.fixture(scope="module")
def pairs(qwen3_tokenizer):
    """Four problems, SAAR on and off: SAAR rolled back p0 and p2, and took 1.0 / 0.5 s longer per pair."""
    records = []
    for index, extra_s in enumerate((1.0, 0.5, 1.0, 0.5)):
        problem = f"p{index}"
        records.append(
            make_record(qwen3_tokenizer, saar=True, rollback=index % 2 == 0, problem_id=problem, latency_s=2 + extra_s)
        )
        records.append(make_record(qwen3_tokenizer, saar=False, rollback=False, problem_id=problem, latency_s=2.0))
    return records


def section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}</h2>")
    return page[start : page.index("<h2>", start + 4)]


def test_paired_comparison_has_intervals(pairs):
    page = render_report(pairs, ["run.jsonl"])
    paired = section(page, "SAAR on vs off, paired")
    assert "4 pairs (same problem, sample and seed)" in paired
    # Latency: on − off = 0.75 s over pairs, sd 0.289, t(3) = 3.18: half-width 0.46 s.
    assert "<td>latency / trajectory (s)</td><td>2.75</td><td>2.00</td><td>+0.75</td><td>[+0.29, +1.21]</td>" in paired
    assert re.search(
        r"Added latency per trajectory with SAAR \(paired\): <b>\+37\.5%</b> \[\+14\.\d%, \+60\.\d%\]", paired
    )
    # Every pair's generated tokens differ by the resample of p0 and p2 only: the same on − off in each of them.
    assert "<td>generated tokens / trajectory</td>" in paired and "<td>accuracy</td>" in paired
    assert "Added latency per trajectory with SAAR: <b>" not in page, "the unpaired point value is replaced"


def test_one_mode_alone_has_no_paired_section(pairs):
    page = render_report([r for r in pairs if r["saar"]], ["run.jsonl"])
    assert "SAAR on vs off, paired" not in page


@pytest.fixture(scope="module")
def groups(qwen3_tokenizer):
    """The same four problems with two samples each and mode: GRPO groups of two."""
    return [
        make_record(qwen3_tokenizer, saar=saar, rollback=saar and index % 2 == 0, problem_id=f"p{index}", sample=sample)
        for index in range(4)
        for sample in range(2)
        for saar in (True, False)
    ]


def test_purification_modes_on_the_recorded_groups(groups):
    table = section(render_report(groups, ["run.jsonl"]), "Purification modes on the same groups")
    failed_calls, trained = table.split("<h3>")[1:3]
    assert failed_calls.startswith("Every failed-call token generated")
    for mode in ("none", "saar", "saar_negative_samples", "error_turn_mask", "void_turn_filter"):
        assert f"<tr><td>{mode}</td><td>2</td>" in failed_calls  # rollouts per prompt
        assert f"<tr><td>{mode}</td><td>8</td>" in trained  # trajectories
    # SAAR's splices of p0 and p2 are trained in a context they were not sampled in; no other mode has any.
    column = 2 + [figure.name for figure in TRAINING_FIGURES].index("offpolicy_token_share")
    assert not cells(trained, "saar")[column].startswith("0.0%")
    assert cells(trained, "none")[column].startswith("0.0% [0.0%, 0.0%]")
    # The error filters' rule removes every failed call: their reinforced shares read so, not 0 %.
    assert cells(trained, "error_trajectory_filter")[2] == "removed"


def test_one_sample_per_problem_is_no_group_and_the_report_says_how_to_get_groups(pairs):
    table = section(render_report(pairs, ["run.jsonl"]), "Purification modes on the same groups")
    assert "<tr><td>none</td>" not in table
    assert "needs at least 2 samples per prompt" in table and "make demo DEMO_ARGS=&quot;-n 4&quot;" in table


def cells(table: str, mode: str) -> list[str]:
    row = table[table.index(f"<tr><td>{mode}</td>") :].split("</tr>")[0]
    return re.findall(r"<td>(.*?)</td>", row)


def test_records_without_turns_get_no_purification_table(pairs):
    records = [{k: v for k, v in record.items() if k != "purify_turns"} for record in pairs]
    assert "Purification modes" not in render_report(records, ["run.jsonl"])
