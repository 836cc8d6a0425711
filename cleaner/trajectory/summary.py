"""Aggregate rollout records per mode (SAAR on / off): accuracy, tool errors, rollback rates, cost, latency.

Every SAAR number is a statistic of `cleaner.saar.aggregate.summarize_saar`, the definition the trainer's
logged metrics, `cleaner eval` and the report share. "Rollbacks triggered" counts failing *positions* that
got at least one retry (not retries, not failed calls).

The failed-call figures are the audit's (cleaner.purify.audit) over every failed-call token generated: SAAR-on
records trained as SAAR trains them, SAAR-off records as sampled (`none`), each prompt's samples one GRPO group.
Their signs need groups: with one sample per prompt only the generated and rolled-back tokens are given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from cleaner.purify.audit import AuditCounts
from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.records import SingleSampleGroupsError, audit_records, require_groups
from cleaner.saar.aggregate import SaarSummary, summarize_saar


def is_correct(record: dict[str, Any]) -> bool:
    if "acc" in record:
        return float(record["acc"]) >= 1.0
    return float(record["score"]) >= 1.0


@dataclass(frozen=True)
class FailedCallSummary:
    """What a mode's training does with the failed calls its records generated (cleaner.purify.audit's counts)."""

    trajectories: int
    counts: AuditCounts | None  # None: the records are groups of one (no GRPO advantage to give the tokens a sign)
    generated_tokens: int
    rolled_back_tokens: int

    @property
    def tokens_per_trajectory(self) -> float:
        return self.generated_tokens / self.trajectories

    @property
    def rolled_back_share(self) -> float | None:
        return self.rolled_back_tokens / self.generated_tokens if self.generated_tokens else None

    def share(self, kind: str) -> float | None:
        """`reinforced`, `penalized` or `untrained` share of the failed-call tokens (None: no groups or no tokens)."""
        if self.counts is None:
            return None
        return self.counts.figures().get(f"failed_call_{kind}_share")


def summarize_failed_calls(records: list[dict[str, Any]], saar: bool) -> FailedCallSummary | None:
    """The failed-call figures of one SAAR mode's records (None when they carry no failed-call record)."""
    if not records or any(record.get(FAILED_CALLS_KEY) is None for record in records):
        return None
    config = PurificationConfig(purification=Purification.SAAR if saar else Purification.NONE)
    groups = [str(record["problem_id"]) for record in records]
    try:
        require_groups(groups)
    except SingleSampleGroupsError:
        counts = None
    else:
        counts = audit_records(records, config, group_of=lambda record: str(record["problem_id"])).counts
    calls = [call for record in records for call in record[FAILED_CALLS_KEY]]
    return FailedCallSummary(
        trajectories=len(records),
        counts=counts,
        generated_tokens=sum(int(call["turn_tokens"]) for call in calls),
        rolled_back_tokens=sum(int(call["turn_tokens"]) for call in calls if call["fate"] == "rolled_back"),
    )


@dataclass(frozen=True)
class ModeSummary:
    saar: bool
    trajectories: int
    accuracy: float
    mean_score: float
    stats: SaarSummary | None  # None when no record carries saar_* statistics (e.g. a plain verl dump)
    latency_s: float | None  # mean wall time of one trajectory (None: not recorded, e.g. a verl dump)
    generated_tokens_per_traj: float | None
    failed_calls: FailedCallSummary | None = None  # None: records without the failed-call record (e.g. a verl dump)

    @property
    def label(self) -> str:
        return "SAAR on" if self.saar else "SAAR off"


def _timing_mean(records: list[dict[str, Any]], name: str) -> float | None:
    values = [float(r["timing"][name]) for r in records if r.get("timing")]
    return mean(values) if values else None


def summarize(records: Iterable[dict[str, Any]]) -> list[ModeSummary]:
    by_mode: dict[bool, list[dict[str, Any]]] = {}
    for record in records:
        by_mode.setdefault(bool(record["saar"]), []).append(record)
    return [
        ModeSummary(
            saar=saar,
            trajectories=len(group),
            accuracy=mean(is_correct(r) for r in group),
            mean_score=mean(float(r["score"]) for r in group),
            stats=summarize_saar(group),
            latency_s=_timing_mean(group, "latency_s"),
            generated_tokens_per_traj=_timing_mean(group, "generated_tokens"),
            failed_calls=summarize_failed_calls(group, saar),
        )
        for saar, group in sorted(by_mode.items(), reverse=True)
    ]


def _saar_row(summaries: list[ModeSummary], name: str, value, fmt: str) -> tuple[str, list[str]]:
    """One row of a SAAR statistic: `value(stats)` formatted, "n/a" where it does not apply."""
    return name, [_maybe(None if s.stats is None else value(s.stats), fmt) for s in summaries]


def summary_rows(summaries: list[ModeSummary]) -> list[tuple[str, list[str]]]:
    """(metric, one formatted value per mode) rows, shared by the terminal table, markdown and the report."""
    return [
        ("trajectories", [str(s.trajectories) for s in summaries]),
        ("accuracy", [f"{s.accuracy:.1%}" for s in summaries]),
        ("mean score", [f"{s.mean_score:.3f}" for s in summaries]),
        _saar_row(summaries, "tool calls / trajectory", lambda x: x.per_trajectory("tool_calls"), "{:.2f}"),
        _saar_row(
            summaries, "tool errors / trajectory (sampled)", lambda x: x.errors_sampled / x.trajectories, "{:.2f}"
        ),
        _saar_row(summaries, "tool errors / trajectory (kept)", lambda x: x.errors_kept / x.trajectories, "{:.2f}"),
        _saar_row(summaries, "rollbacks triggered (positions)", lambda x: x.total("rollbacks_triggered"), "{}"),
        _saar_row(summaries, "recovery rate", lambda x: x.recovery_rate, "{:.1%}"),
        _saar_row(
            summaries,
            "shallow / deep / failed",
            lambda x: f"{x.total('rollbacks_shallow')} / {x.total('rollbacks_deep')} / {x.total('rollbacks_failed')}",
            "{}",
        ),
        _saar_row(summaries, "resampled tokens / trajectory", lambda x: x.per_trajectory("resampled_tokens"), "{:.1f}"),
        _saar_row(summaries, "spliced token fraction", lambda x: x.spliced_token_fraction, "{:.1%}"),
        _saar_row(summaries, "response tokens / trajectory", lambda x: x.per_trajectory("response_tokens"), "{:.1f}"),
        ("generated tokens / trajectory", [_maybe(s.generated_tokens_per_traj, "{:.1f}") for s in summaries]),
        *_failed_call_rows(summaries),
        ("latency / trajectory (s)", [_maybe(s.latency_s, "{:.2f}") for s in summaries]),
    ]


NO_GROUPS = "needs n >= 2 (cleaner rollout -n 4)"


def _failed_call_rows(summaries: list[ModeSummary]) -> list[tuple[str, list[str]]]:
    """The failed-call rows: generated and rolled-back tokens, then what training does with them."""

    def cells(value) -> list[str]:
        return [value(s.failed_calls) if s.failed_calls is not None else "n/a" for s in summaries]

    def signs(failed: FailedCallSummary) -> str:
        if failed.generated_tokens == 0:
            return "no failed call"
        if failed.counts is None:
            return NO_GROUPS
        shares = [failed.share(kind) for kind in ("reinforced", "penalized", "untrained")]
        return " / ".join(_maybe(share, "{:.1%}") for share in shares)

    return [
        ("failed-call tokens / trajectory (generated)", cells(lambda f: f"{f.tokens_per_trajectory:.1f}")),
        ("failed-call tokens rolled back", cells(lambda f: _maybe(f.rolled_back_share, "{:.1%}"))),
        ("failed-call tokens reinforced / penalized / untrained", cells(signs)),
    ]


def _maybe(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def added_latency(summaries: list[ModeSummary]) -> float | None:
    """Relative extra latency per trajectory of SAAR on over off (None unless both modes ran)."""
    on = next((s for s in summaries if s.saar), None)
    off = next((s for s in summaries if not s.saar), None)
    if on is None or off is None or not on.latency_s or not off.latency_s:
        return None
    return on.latency_s / off.latency_s - 1.0


def render_table(summaries: list[ModeSummary], title: str = "rollout summary"):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for summary in summaries:
        table.add_column(summary.label, justify="right")
    for name, values in summary_rows(summaries):
        table.add_row(name, *values)
    extra = added_latency(summaries)
    if extra is not None:
        table.caption = f"added latency per trajectory with SAAR: {extra:+.1%}"
    return table


def render_markdown(summaries: list[ModeSummary]) -> str:
    lines = ["| metric | " + " | ".join(s.label for s in summaries) + " |", "|---|" + "---:|" * len(summaries)]
    lines += [f"| {name} | " + " | ".join(values) + " |" for name, values in summary_rows(summaries)]
    return "\n".join(lines)
