"""The HTML report: summary, plots, and per trajectory the purified view next to the raw view."""

from __future__ import annotations

import difflib
import html
import math
from datetime import datetime, timezone
from typing import Any

from cleaner.analysis.offpolicy import event_log_is, record_splices
from cleaner.saar.offpolicy_summary import (
    HIGH_IS,
    KIND_LABELS,
    LOW_IS,
    SPAN_KINDS,
    Distribution,
    ScoredSplice,
    gate_metrics,
    share_outside,
)
from cleaner.saar.stats import PREFIX
from cleaner.trajectory.summary import ModeSummary, added_latency, summarize, summary_rows

from .comparison import paired_section, purification_section
from .svg import BarChart, render_bar_chart

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.summary { border-collapse: collapse; } table.summary td, table.summary th { border: 1px solid #ccc; padding: 3px 8px; }
table.summary td:not(:first-child) { text-align: right; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { border: 1px solid #ddd; background: #fff; }
details.traj { border: 1px solid #ccc; margin: 6px 0; padding: 4px 8px; }
details.traj > summary { cursor: pointer; }
.views { display: grid; grid-template-columns: 1fr 1fr; gap: 10px; }
.view h4 { margin: 4px 0; }
pre { white-space: pre-wrap; word-break: break-word; margin: 2px 0; padding: 4px; font-size: 12px; }
.assistant { background: #f3f6fb; } .context { background: #f1f1f1; color: #555; }
.spliced { background: #d8f3dc; outline: 1px solid #52b788; }
.failed { background: #fde2e0; outline: 1px solid #e76f51; }
.hidden-error { background: #fff3cd; }
.diff .add { background: #d8f3dc; } .diff .del { background: #fde2e0; } .diff .hunk { color: #888; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 11px; background: #eee; margin-left: 4px; }
.badge.shallow { background: #bde0fe; } .badge.deep { background: #ffc8dd; } .badge.failedmode { background: #ffd6a5; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def charts(summaries: list[ModeSummary]) -> list[BarChart]:
    def per_mode(fn) -> dict[str, list[float]]:
        return {s.label: [fn(s)] for s in summaries}

    result = [BarChart("Accuracy", ["accuracy"], per_mode(lambda s: s.accuracy), value_format="{:.0%}")]
    with_stats = [s for s in summaries if s.stats is not None]
    if with_stats:
        # A rate that does not apply (nothing to divide by) is drawn as 0; the summary table says "n/a".
        result[:0] = [
            BarChart(
                "Rollback and recovery rates",
                ["rollback rate", "recovery rate"],
                {s.label: [s.stats.rollback_rate or 0.0, s.stats.recovery_rate or 0.0] for s in with_stats},
                value_format="{:.0%}",
            ),
            BarChart(
                "Tool errors per trajectory",
                ["sampled", "kept in trajectory"],
                {
                    s.label: [s.stats.errors_sampled / s.stats.trajectories, s.stats.errors_kept / s.stats.trajectories]
                    for s in with_stats
                },
            ),
            BarChart(
                "Rollbacks: shallow vs deep",
                ["shallow", "deep", "not recovered"],
                {
                    s.label: [
                        s.stats.total(name) for name in ("rollbacks_shallow", "rollbacks_deep", "rollbacks_failed")
                    ]
                    for s in with_stats
                },
                value_format="{:.0f}",
            ),
        ]
    if all(s.latency_s is not None for s in summaries):
        result.append(BarChart("Latency per trajectory (s)", ["latency"], per_mode(lambda s: s.latency_s)))
        result.append(
            BarChart(
                "Generated tokens per trajectory",
                ["generated"],
                per_mode(lambda s: s.generated_tokens_per_traj),
                "{:.0f}",
            )
        )
    return result


# Bins of a rollback's log IS ratio for the histogram: the far tail, the tail, below the Plan B scale, inside
# [0.5, 2], above 2.
LOG_IS_BINS: tuple[tuple[float, float, str], ...] = (
    (-math.inf, -20.0, "< −20"),
    (-20.0, -5.0, "−20 … −5"),
    (-5.0, math.log(LOW_IS), f"−5 … ln {LOW_IS}"),
    (math.log(LOW_IS), math.log(HIGH_IS), f"IS {LOW_IS} … {HIGH_IS:g}"),
    (math.log(HIGH_IS), math.inf, f"IS > {HIGH_IS:g}"),
)


def log_is_histogram(by_kind: dict[str, list[float]]) -> BarChart:
    """Rollbacks per log-IS bin, one series per kind (shallow, deep, not recovered)."""

    def count(values: list[float], low: float, high: float) -> float:
        # The [0.5, 2] bin is closed on both ends, the others half-open.
        return float(sum(1 for v in values if low <= v < high or (v == high and high == math.log(HIGH_IS))))

    return BarChart(
        "Rollbacks by log IS ratio (Σ over spliced tokens)",
        [label for _, _, label in LOG_IS_BINS],
        {
            KIND_LABELS[kind]: [count(by_kind[kind], low, high) for low, high, _ in LOG_IS_BINS]
            for kind in SPAN_KINDS
            if kind in by_kind
        },
        value_format="{:.0f}",
        width=560,
    )


def offpolicy_section(records: list[dict[str, Any]]) -> str:
    """How off-policy the spliced tokens are: the recorded log IS ratio of every scored rollback, by kind."""
    by_kind = event_log_is(records)
    if not by_kind:
        return ""
    rows = []
    for kind in SPAN_KINDS:
        if kind not in by_kind:
            continue
        dist = Distribution.of(by_kind[kind])
        below, above = share_outside(by_kind[kind])
        cells = [KIND_LABELS[kind], str(dist.n)] + [f"{x:+.2f}" for x in (dist.mean, dist.p10, dist.p50, dist.p90)]
        cells += [f"{dist.low:+.2f} … {dist.high:+.2f}", f"{below:.0%}", f"{above:.0%}"]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = [
        "rollbacks",
        "n",
        "log IS mean",
        "p10",
        "p50",
        "p90",
        "min … max",
        f"IS &lt; {LOW_IS}",
        f"IS &gt; {HIGH_IS:g}",
    ]
    return (
        "<h2>Off-policy spliced tokens</h2>"
        "<p>Per rollback, log IS = Σ over the tokens it spliced in of log π(token | purified context) − "
        "log π(token | context it was sampled in, with the failed attempt and its error).</p>"
        '<table class="summary"><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"
        f"{gate_section(record_splices(records))}"
        f'<div class="charts">{render_bar_chart(log_is_histogram(by_kind), "chart-log-is")}</div>'
    )


def gate_section(splices: list[ScoredSplice]) -> str:
    """The scored rollbacks by the gate's decision: the two statistics a gate compares with log τ."""
    rows = []
    for decision in ("replace", "append", None):
        metrics = gate_metrics([splice for splice in splices if splice.decision == decision])
        if not metrics:
            continue
        cells = [decision or "measured only", f"{metrics['scored']:.0f}"]
        cells += [f"{metrics[f'log_ratio_p{q}']:+.2f}" for q in (10, 50, 90)]
        cells += [
            f"{metrics[key]:+.3f}" if key in metrics else "–" for key in ("per_token_p50", "log_ratio_per_token_mean")
        ]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = ["decision", "n", "log IS p10", "p50", "p90", "mean d per token, p50", "d per token, all tokens"]
    return (
        "<p>What the IS gate compares with log τ: the sequence statistic (log IS) and the per-token one (the mean "
        "d over a rollback's scored tokens).</p>"
        '<table class="summary"><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"
    )


def code_diff(old: str, new: str) -> str:
    lines = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), "failed", "replacement", lineterm="", n=2):
        css = (
            "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "hunk"
            if line.startswith("@@")
            else ""
        )
        lines.append(f'<span class="{css}">{_e(line)}</span>' if css else _e(line))
    return '<pre class="diff">' + ("\n".join(lines) or "(identical code)") + "</pre>"


def _piece_html(piece: dict[str, Any]) -> str:
    css = piece["role"]
    title = ""
    if piece.get("spliced_attempt") is not None:
        css += " spliced"
        title = f' title="from resample {piece["spliced_attempt"]}"'
    return f'<pre class="{css}"{title}>{_e(piece["text"])}</pre>'


def purified_view(record: dict[str, Any]) -> str:
    return "".join(_piece_html(piece) for piece in record["pieces"])


def raw_view(record: dict[str, Any]) -> str:
    """The trajectory as sampled: before each purified turn, the failed attempts a rollback removed."""
    removed = {
        event["position"]: event
        for event in record.get(PREFIX + "rollback_events") or []
        if event["mode"] in ("shallow", "deep")
    }
    parts, shown = [], set()
    for piece in record["pieces"]:
        turn = piece["turn"]
        if piece["role"] == "assistant" and turn in removed and turn not in shown:
            event = removed[turn]
            shown.add(turn)
            parts.append(
                f'<pre class="assistant failed">[rolled-back attempt; its code:]\n{_e(event["failed_code"])}</pre>'
            )
            parts.append(f'<pre class="context failed">{_e(event["error_text"])}</pre>')
            if event["retries"] > 1:
                parts.append(
                    f'<pre class="context failed">({event["retries"] - 1} more failed resample(s) not shown)</pre>'
                )
        css = piece["role"]
        parts.append(f'<pre class="{css}">{_e(piece["text"])}</pre>')
    return "".join(parts)


def _is_badges(event: dict[str, Any]) -> str:
    """The splice's log IS ratio and the Plan B gate's decision, when they were recorded."""
    parts = []
    if event.get("log_is_ratio") is not None:
        parts.append(f'<span class="badge">log IS {event["log_is_ratio"]:+.2f}</span>')
    if event.get("is_decision") is not None:
        parts.append(f'<span class="badge">{_e(event["is_decision"])}</span>')
    return "".join(parts)


def rollback_section(record: dict[str, Any]) -> str:
    events = record.get(PREFIX + "rollback_events") or []
    if not events:
        return ""
    parts = ["<h4>Rollbacks</h4>"]
    for event in events:
        mode = event["mode"]
        similarity = "n/a" if event["similarity"] is None else f"{event['similarity']:.2f}"
        parts.append(
            f'<div class="rollback"><b>turn {event["position"]}</b>'
            f'<span class="badge {"failedmode" if mode == "failed" else mode}">{_e(mode)}</span>'
            f'<span class="badge">similarity {similarity}</span><span class="badge">retries {event["retries"]}</span>'
            f'<span class="badge">resampled tokens {event["resampled_tokens"]}</span>'
            f"{_is_badges(event)}"
            f'<span class="badge">{_e(event["error_category"])}{": " + _e(event["exception_type"]) if event["exception_type"] else ""}</span>'
        )
        parts.append(f'<div>hidden error:</div><pre class="hidden-error">{_e(event["error_text"])}</pre>')
        if event["replacement_code"] is not None:
            parts.append(code_diff(event["failed_code"], event["replacement_code"]))
        else:
            parts.append(f'<pre class="failed">{_e(event["failed_code"])}</pre>')
        parts.append("</div>")
    return "".join(parts)


def trajectory_html(record: dict[str, Any]) -> str:
    events = record.get(PREFIX + "rollback_events") or []
    head = (
        f"{_e(record['problem_id'])} · sample {record['sample']} · SAAR {'on' if record['saar'] else 'off'} · "
        f"score {float(record['score']):.2f} · {len(events)} rollback(s)"
    )
    return (
        f'<details class="traj" data-key="{_e(record["key"])}"><summary>{head}</summary>'
        f'<pre class="context">{_e(record.get("prompt_text", ""))}</pre>'
        f"{rollback_section(record)}"
        '<div class="views">'
        f'<div class="view purified"><h4>Purified (what training sees)</h4>{purified_view(record)}</div>'
        f'<div class="view raw"><h4>Raw (as sampled, with failed attempts)</h4>{raw_view(record)}</div>'
        "</div></details>"
    )


def render_report(records: list[dict[str, Any]], sources: list[str], max_trajectories: int = 200) -> str:
    summaries = summarize(records)
    rows = summary_rows(summaries)
    table = (
        '<table class="summary"><tr><th>metric</th>'
        + "".join(f"<th>{_e(s.label)}</th>" for s in summaries)
        + "</tr>"
        + "".join(
            "<tr><td>" + _e(name) + "</td>" + "".join(f"<td>{_e(v)}</td>" for v in values) + "</tr>"
            for name, values in rows
        )
        + "</table>"
    )
    # Paired records give the added latency with an interval; otherwise the ratio of the two modes' means.
    paired = paired_section(records)
    extra = None if paired else added_latency(summaries)
    latency_note = f"<p>Added latency per trajectory with SAAR: <b>{extra:+.1%}</b></p>" if extra is not None else ""
    plots = "".join(render_bar_chart(chart, f"chart-{index}") for index, chart in enumerate(charts(summaries)))
    # Trajectories with rollbacks first: they are what the report is for.
    ordered = sorted(
        records,
        key=lambda r: (-len(r.get(PREFIX + "rollback_events") or []), str(r["problem_id"]), r["sample"], r["saar"]),
    )
    shown = ordered[:max_trajectories]
    note = f"<p>Showing {len(shown)} of {len(records)} trajectories.</p>" if len(shown) < len(records) else ""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>CLEANER rollout report</title>'
        f"<style>{STYLE}</style></head><body>"
        f"<h1>CLEANER rollout report</h1><p>{len(records)} trajectories from {_e(', '.join(sources))} · {generated}</p>"
        f"<h2>Summary</h2>{table}{latency_note}{paired}{purification_section(records)}"
        f'<h2>Plots</h2><div class="charts">{plots}</div>'
        f"{offpolicy_section(records)}"
        f"<h2>Trajectories</h2>{note}{''.join(trajectory_html(r) for r in shown)}"
        "</body></html>"
    )
