"""The report page: purified vs raw views, rollback diffs, summary, and inline SVG plots."""

from __future__ import annotations

import json

import pytest
from report_records import ERROR_TEXT, make_record

from cleaner.report.loading import load_trajectories
from cleaner.report.page import render_report
from cleaner.trajectory.summary import added_latency, summarize


@pytest.fixture(scope="module")
def records(qwen3_tokenizer):
    return [
        make_record(qwen3_tokenizer, saar=True, rollback=True, latency_s=3.0),
        make_record(qwen3_tokenizer, saar=True, rollback=False, problem_id="p1", latency_s=2.0),
        make_record(qwen3_tokenizer, saar=False, rollback=False, latency_s=2.0),
        make_record(qwen3_tokenizer, saar=False, rollback=False, problem_id="p1", latency_s=2.0),
    ]


def test_record_pieces_follow_mask_and_splice(records):
    record = records[0]
    pieces = record["pieces"]
    assert [p["role"] for p in pieces] == ["assistant", "context", "assistant"]
    assert [p["turn"] for p in pieces] == [0, 0, 1]
    assert pieces[0]["spliced_attempt"] == 1 and pieces[2]["spliced_attempt"] is None
    assert pieces[-1]["end"] == len(record["response_ids"]) == len(record["response_mask"])
    assert record["saar_rollback_events"][0]["mode"] == "deep"


def test_summary_counts_hidden_errors_and_latency(records):
    on, off = summarize(records)
    assert on.saar and not off.saar
    assert on.stats.errors_sampled / on.stats.trajectories == 0.5 and on.stats.errors_kept == 0
    assert on.stats.total("rollbacks_deep") == 1 and on.stats.recovery_rate == 1.0
    assert off.stats.recovery_rate is None  # nothing was triggered: not applicable, not 0 %
    assert added_latency([on, off]) == pytest.approx(0.25)


def test_raw_view_shows_the_failure_the_purified_view_hides(records):
    page = render_report(records, ["run.jsonl"])
    start = page.index('data-key="p0#0#saar"')
    block = page[start : page.index("</details>", start)]
    purified = block[block.index('class="view purified"') : block.index('class="view raw"')]
    raw = block[block.index('class="view raw"') :]
    escaped_code = "print(sum(primes[:100])  # &lt;script&gt;alert(1)&lt;/script&gt;"
    assert escaped_code in raw and escaped_code not in purified
    assert "never closed" in raw and "never closed" not in purified
    assert 'class="assistant spliced"' in purified
    assert "<script>" not in page, "model text must be escaped"
    assert '<span class="add">+primes = [p for p' in block and "similarity 0.31" in block
    assert ERROR_TEXT.splitlines()[1].replace("'", "&#x27;") in block


def test_plots_are_inline_svg(records):
    page = render_report(records, ["run.jsonl"])
    assert page.count('<svg class="chart"') == 6
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', ""), "the page must not load anything"


def test_verl_validation_dump_rows_are_reported(tmp_path):
    dump = tmp_path / "12.jsonl"
    rows = [
        {
            "input": "user: 1+1?",
            "output": "\\boxed{2}",
            "gts": "2",
            "score": 1.0,
            "acc": 1.0,
            "step": 12,
            "uid": "abc_0_0",
        },
        {
            "input": "user: 2+2?",
            "output": "\\boxed{5}",
            "gts": "4",
            "score": 0.0,
            "acc": 0.0,
            "step": 12,
            "uid": "def_0_0",
        },
    ]
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    records = load_trajectories([tmp_path])
    assert [r["problem_id"] for r in records] == ["abc", "def"]
    page = render_report(records, [str(dump)])
    assert "\\boxed{5}" in page and page.count('<details class="traj"') == 2


def test_unknown_rows_are_rejected(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="neither a `cleaner rollout` record"):
        load_trajectories([bad])


def test_report_command_writes_the_page(records, tmp_path):
    from cleaner.cli import main as cleaner_main

    source = tmp_path / "run.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out" / "report.html"
    assert cleaner_main(["report", str(source), "-o", str(out), "--max-trajectories", "1"]) == 0
    page = out.read_text()
    assert "Showing 1 of 4 trajectories" in page and page.count('<details class="traj"') == 1
    assert 'data-key="p0#0#saar"' in page, "trajectories with rollbacks come first"


def with_scores(record, log_is, decision=None):
    events = [{**event, "log_is_ratio": log_is, "is_decision": decision} for event in record["saar_rollback_events"]]
    return {**record, "saar_rollback_events": events}


def test_scored_rollbacks_get_the_off_policy_table_and_histogram(records):
    import math

    scored = [
        with_scores(records[0], -26.9),
        with_scores({**records[0], "key": "p0#1#saar", "sample": 1}, math.log(0.8), decision="replace"),
        *records[1:],
    ]
    page = render_report(scored, ["run.jsonl"])
    section = page[page.index("<h2>Off-policy spliced tokens</h2>") : page.index("<h2>Trajectories</h2>")]
    # Both rollbacks of the fixture are deep: one far below IS 0.5, one inside [0.5, 2].
    assert "<td>deep</td><td>2</td>" in section and "<td>50%</td><td>0%</td>" in section
    assert 'id="chart-log-is"' in section
    assert "<title>deep / &lt; −20: 1</title>" in section and "<title>deep / IS 0.5 … 2: 1</title>" in section
    assert "log IS -26.90" in page and "log IS -0.22" in page and '<span class="badge">replace</span>' in page
    # The gate's table: the replaced rollback apart from the measured-only one (no is_tokens: no per-token column)
    assert "<td>replace</td><td>1</td><td>-0.22</td>" in section
    assert "<td>measured only</td><td>1</td><td>-26.90</td>" in section
    # Without scores the section is left out.
    assert "Off-policy spliced tokens" not in render_report(records, ["run.jsonl"])
