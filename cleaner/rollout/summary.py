"""Aggregate rollout records per mode (SAAR on / off): accuracy, tool errors, rollback rates, cost, latency."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from cleaner.saar.outcome import MODEL_ERROR_CATEGORIES
from cleaner.saar.stats import PREFIX

_MODEL_FAIL_KEYS = tuple(f"{PREFIX}fail_{category.value}" for category in MODEL_ERROR_CATEGORIES)


def model_errors(record: dict[str, Any]) -> int:
    """Model-caused tool failures that happened while sampling (retries included)."""
    return sum(int(record.get(key, 0)) for key in _MODEL_FAIL_KEYS)


def visible_errors(record: dict[str, Any]) -> int:
    """Failures still shown in the final trajectory: every failed attempt a rollback replaced is gone."""
    events = record.get(PREFIX + "rollback_events") or []
    hidden = sum(event["retries"] for event in events if event["mode"] in ("shallow", "deep"))
    return max(model_errors(record) - hidden, 0)


def is_correct(record: dict[str, Any]) -> bool:
    if "acc" in record:
        return float(record["acc"]) >= 1.0
    return float(record["score"]) >= 1.0


@dataclass(frozen=True)
class ModeSummary:
    saar: bool
    trajectories: int
    accuracy: float
    mean_score: float
    tool_calls_per_traj: float
    errors_per_traj: float  # failures that happened (incl. retries)
    visible_errors_per_traj: float  # failures left in the final (purified) trajectories
    first_attempt_calls: int
    rollbacks_triggered: int
    rollbacks_recovered: int
    rollbacks_shallow: int
    rollbacks_deep: int
    rollbacks_failed: int
    resampled_tokens_per_traj: float
    spliced_token_fraction: float
    response_tokens_per_traj: float
    latency_s: float | None  # mean wall time of one trajectory (None: not recorded, e.g. a verl dump)
    generated_tokens_per_traj: float | None

    @property
    def recovery_rate(self) -> float:
        return self.rollbacks_recovered / self.rollbacks_triggered if self.rollbacks_triggered else 0.0

    @property
    def rollback_rate(self) -> float:
        """Share of first-attempt tool calls that failed and were retried."""
        return self.rollbacks_triggered / self.first_attempt_calls if self.first_attempt_calls else 0.0

    @property
    def label(self) -> str:
        return "SAAR on" if self.saar else "SAAR off"


def _stat(records: list[dict[str, Any]], name: str) -> int:
    # verl validation dumps carry saar_* fields only when the trainer exported them: absent counts as 0.
    return sum(int(record.get(PREFIX + name, 0)) for record in records)


def _timing_mean(records: list[dict[str, Any]], name: str) -> float | None:
    values = [float(r["timing"][name]) for r in records if r.get("timing")]
    return mean(values) if values else None


def summarize(records: Iterable[dict[str, Any]]) -> list[ModeSummary]:
    by_mode: dict[bool, list[dict[str, Any]]] = {}
    for record in records:
        by_mode.setdefault(bool(record["saar"]), []).append(record)
    summaries = []
    for saar in sorted(by_mode, reverse=True):
        group = by_mode[saar]
        count = len(group)
        summaries.append(
            ModeSummary(
                saar=saar,
                trajectories=count,
                accuracy=mean(is_correct(r) for r in group),
                mean_score=mean(float(r["score"]) for r in group),
                tool_calls_per_traj=_stat(group, "tool_calls") / count,
                errors_per_traj=mean(model_errors(r) for r in group),
                visible_errors_per_traj=mean(visible_errors(r) for r in group),
                first_attempt_calls=_stat(group, "first_attempt_calls"),
                rollbacks_triggered=_stat(group, "rollbacks_triggered"),
                rollbacks_recovered=_stat(group, "rollbacks_recovered"),
                rollbacks_shallow=_stat(group, "rollbacks_shallow"),
                rollbacks_deep=_stat(group, "rollbacks_deep"),
                rollbacks_failed=_stat(group, "rollbacks_failed"),
                resampled_tokens_per_traj=_stat(group, "resampled_tokens") / count,
                spliced_token_fraction=mean(float(r.get(PREFIX + "spliced_token_fraction", 0.0)) for r in group),
                response_tokens_per_traj=_stat(group, "response_tokens") / count,
                latency_s=_timing_mean(group, "latency_s"),
                generated_tokens_per_traj=_timing_mean(group, "generated_tokens"),
            )
        )
    return summaries


def summary_rows(summaries: list[ModeSummary]) -> list[tuple[str, list[str]]]:
    """(metric, one formatted value per mode) rows, shared by the terminal table and markdown."""
    rows = [
        ("trajectories", [str(s.trajectories) for s in summaries]),
        ("accuracy", [f"{s.accuracy:.1%}" for s in summaries]),
        ("mean score", [f"{s.mean_score:.3f}" for s in summaries]),
        ("tool calls / trajectory", [f"{s.tool_calls_per_traj:.2f}" for s in summaries]),
        ("tool errors / trajectory (sampled)", [f"{s.errors_per_traj:.2f}" for s in summaries]),
        ("tool errors / trajectory (kept)", [f"{s.visible_errors_per_traj:.2f}" for s in summaries]),
        ("rollbacks triggered", [str(s.rollbacks_triggered) for s in summaries]),
        ("recovery rate", [f"{s.recovery_rate:.1%}" for s in summaries]),
        (
            "shallow / deep / failed",
            [f"{s.rollbacks_shallow} / {s.rollbacks_deep} / {s.rollbacks_failed}" for s in summaries],
        ),
        ("resampled tokens / trajectory", [f"{s.resampled_tokens_per_traj:.1f}" for s in summaries]),
        ("spliced token fraction", [f"{s.spliced_token_fraction:.1%}" for s in summaries]),
        ("response tokens / trajectory", [f"{s.response_tokens_per_traj:.1f}" for s in summaries]),
        ("generated tokens / trajectory", [_maybe(s.generated_tokens_per_traj, "{:.1f}") for s in summaries]),
        ("latency / trajectory (s)", [_maybe(s.latency_s, "{:.2f}") for s in summaries]),
    ]
    return rows


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
