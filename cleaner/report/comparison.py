"""The report's comparisons with intervals: SAAR on vs off paired by problem and sample (the table `make demo`
prints), and every purification mode on the same groups (the table of `benchmarks/purification.py`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from cleaner.analysis.paired import MIN_PAIRS_FOR_INTERVAL, PairedDifference, pair_up, paired_difference, shares_prefix
from cleaner.analysis.paired import paired_differences as demo_paired_differences
from cleaner.analysis.purification_table import (
    PurificationTableError,
    has_turns,
    purification_table,
    sections,
    table_notes,
)

LATENCY_METRIC = "latency / trajectory (s)"


def _e(text: Any) -> str:
    return html.escape(str(text))


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return (
        '<table class="summary"><tr>'
        + "".join(f"<th>{_e(cell)}</th>" for cell in head)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
        + "</table>"
    )


def _interval(diff: PairedDifference) -> str:
    interval = diff.interval()
    return "n/a" if interval is None else f"[{interval[0]:+.2f}, {interval[1]:+.2f}]"


def paired_section(records: list[dict[str, Any]]) -> str:
    """SAAR on − off over the pairs of `cleaner rollout` records (same problem, sample and seed), with 95 %
    Student-t intervals, and the added latency as a paired difference; empty without pairs."""
    pairs = [pair for pair in pair_up(r for r in records if r.get("timing")) if pair.off.get("timing")]
    if not pairs:
        return ""
    differences = demo_paired_differences(pairs)
    latency = paired_difference(
        LATENCY_METRIC,
        [float(pair.on["timing"]["latency_s"]) for pair in pairs],
        [float(pair.off["timing"]["latency_s"]) for pair in pairs],
    )
    rows = [
        [d.metric, f"{d.on:.2f}", f"{d.off:.2f}", f"{d.difference:+.2f}", _interval(d)] for d in [*differences, latency]
    ]
    aligned = sum(shares_prefix(pair) for pair in pairs)
    relative = latency.difference / latency.off if latency.off > 0 else None
    interval = latency.interval()
    if relative is None:
        latency_line = ""
    elif interval is None:
        latency_line = f"<p>Added latency per trajectory with SAAR (paired): <b>{relative:+.1%}</b>.</p>"
    else:
        latency_line = (
            f"<p>Added latency per trajectory with SAAR (paired): <b>{relative:+.1%}</b> "
            f"[{interval[0] / latency.off:+.1%}, {interval[1] / latency.off:+.1%}] of SAAR off's mean "
            f"{latency.off:.2f} s.</p>"
        )
    return (
        "<h2>SAAR on vs off, paired</h2>"
        f"<p>{len(pairs)} pairs (same problem, sample and seed), {aligned} identical up to SAAR's first action. "
        "Mean over pairs; on − off with its 95 % Student-t interval "
        f"(none below {MIN_PAIRS_FOR_INTERVAL} pairs).</p>"
        + _table(["metric", "SAAR on", "SAAR off", "on − off", "95 % interval"], rows)
        + latency_line
    )


def purification_section(records: list[dict[str, Any]]) -> str:
    """Every purification mode on the recorded groups; empty unless every record has the per-turn record."""
    if not records or not all(has_turns(record) for record in records):
        return ""
    try:
        table = purification_table(records)
    except PurificationTableError as exc:  # e.g. one sample per prompt: say how to get groups
        return f"<h2>Purification modes on the same groups</h2><p>Not compared: {_e(exc)}</p>"
    tables = "".join(f"<h3>{_e(part.title)}</h3>" + _table(part.head, part.rows) for part in sections(table))
    notes = "".join(f"<li>{_e(note.replace('`', ''))}</li>" for note in table_notes(table))
    return "<h2>Purification modes on the same groups</h2>" + tables + f"<ul>{notes}</ul>"
