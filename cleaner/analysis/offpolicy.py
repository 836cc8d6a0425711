"""How off-policy are spliced tokens: per-token log ratios and per-rollback log IS ratios of rollout records.

A token SAAR splices in was sampled by π(· | context holding the failed attempt and its error); training
treats it as sampled in the purified context. With both log-probs of a response token,

    d = log π(token | purified context) − log π_b(token | context it was sampled in),

where π_b is the `response_logprobs` the server returned while sampling. On spliced tokens d measures the gap;
on every other model token (the control) both contexts are the same, so d measures only engine numerics. The
log IS ratio of one rollback is the sum of d over the tokens it spliced in (the reference's Plan B ratio).

Pure: records and scored log-probs in, numbers and Markdown out. The scores come either from the agent loop
(`rollback_is_measure` or the gate: each rollback event's `log_is_ratio`) or from a post-hoc scorer such as
`cleaner.rollout.forced_scoring` (llama.cpp cannot return prompt log-probs). Groups, constants and statistics are
`cleaner.saar.offpolicy_summary`'s, as in the trainer's metrics and the report.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cleaner.saar.offpolicy_summary import (
    HIGH_IS,
    KIND_LABELS,
    LOW_IS,
    SPAN_KINDS,
    Distribution,
    ScoredSplice,
    gate_metrics,
    kind_of_mode,
    scored_splices,
    share_outside,
)
from cleaner.saar.stats import PREFIX

Record = Mapping[str, Any]


@dataclass(frozen=True)
class SplicedSpan:
    """Response tokens [start, end) that one rollback spliced in, and that rollback's mode."""

    start: int
    end: int
    position: int  # the rollback event's position (assistant turn)
    kind: str  # shallow / deep / exhausted


def _turn_of(record: Record, index: int) -> int:
    for piece in record["pieces"]:
        if piece["start"] <= index < piece["end"]:
            return int(piece["turn"])
    raise ValueError(f"{record['key']}: response token {index} lies in no piece")


def spliced_spans(record: Record) -> list[SplicedSpan]:
    """Each entry of `saar_spliced_spans` ([start, end, attempt, kind]) with the position of its rollback event."""
    events = {int(event["position"]): event for event in record.get(PREFIX + "rollback_events") or []}
    spans = []
    for entry in record.get(PREFIX + "spliced_spans") or []:
        start, end = int(entry[0]), int(entry[1])
        position = _turn_of(record, start)
        if position not in events:
            raise ValueError(
                f"{record['key']}: spliced span [{start}, {end}) is in turn {position}, which has no rollback event"
            )
        kind = str(entry[3]) if len(entry) > 3 else kind_of_mode(str(events[position]["mode"]))
        spans.append(SplicedSpan(start, end, position, kind))
    return spans


def control_indices(record: Record) -> list[int]:
    """Model tokens (mask 1) outside every spliced span: sampled in the context training sees."""
    spliced = {i for span in record.get(PREFIX + "spliced_spans") or [] for i in range(int(span[0]), int(span[1]))}
    return [i for i, m in enumerate(record["response_mask"]) if m and i not in spliced]


@dataclass(frozen=True)
class ScoredSpan:
    key: str  # trajectory key
    position: int
    kind: str
    deltas: list[float]  # d per spliced token

    @property
    def log_is(self) -> float:
        return math.fsum(self.deltas)


@dataclass(frozen=True)
class ScoredTrajectory:
    key: str
    spans: list[ScoredSpan]
    control_deltas: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "spans": [{"position": s.position, "kind": s.kind, "deltas": s.deltas} for s in self.spans],
            "control_deltas": self.control_deltas,
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> ScoredTrajectory:
        spans = [
            ScoredSpan(row["key"], int(s["position"]), kind_of_mode(s["kind"]), list(s["deltas"])) for s in row["spans"]
        ]
        return cls(row["key"], spans, list(row["control_deltas"]))


# (full token sequence, indices into it) -> log π(sequence[i] | sequence[:i]) for each index.
ScoreFn = Callable[[list[int], list[int]], Awaitable[list[float]]]


async def score_trajectory(record: Record, score: ScoreFn, with_control: bool = True) -> ScoredTrajectory:
    """d for the spliced tokens of every rollback (and the control tokens) of one final, purified record."""
    behaviour = record.get("response_logprobs")
    if behaviour is None:
        raise ValueError(f"{record['key']}: no response_logprobs (the server returned no log-probs)")
    spans = spliced_spans(record)
    wanted = sorted(
        {i for s in spans for i in range(s.start, s.end)} | set(control_indices(record) if with_control else [])
    )
    offset = len(record["prompt_ids"])
    sequence = list(record["prompt_ids"]) + list(record["response_ids"])
    scored = dict(zip(wanted, await score(sequence, [offset + i for i in wanted]))) if wanted else {}

    def deltas(indices: Iterable[int]) -> list[float]:
        return [scored[i] - float(behaviour[i]) for i in indices]

    by_event: dict[int, list[SplicedSpan]] = {}
    for span in spans:
        by_event.setdefault(span.position, []).append(span)
    scored_spans = [
        ScoredSpan(record["key"], position, group[0].kind, deltas(i for s in group for i in range(s.start, s.end)))
        for position, group in sorted(by_event.items())
    ]
    control = deltas(control_indices(record)) if with_control else []
    return ScoredTrajectory(record["key"], scored_spans, control)


def with_log_is(record: Record, scored: ScoredTrajectory) -> dict[str, Any]:
    """The record with each rollback event's `log_is_ratio` and `is_tokens` set from the scores (no span: None)."""
    by_position = {span.position: span for span in scored.spans}
    events = []
    for event in record.get(PREFIX + "rollback_events") or []:
        span = by_position.get(int(event["position"]))
        events.append(
            {
                **event,
                "log_is_ratio": None if span is None else span.log_is,
                "is_tokens": None if span is None else len(span.deltas),
            }
        )
    return {**record, PREFIX + "rollback_events": events}


def record_splices(records: Iterable[Record]) -> list[ScoredSplice]:
    """Every scored rollback event of the records (the gate's or the measurement's `log_is_ratio`)."""
    return scored_splices(event for record in records for event in record.get(PREFIX + "rollback_events") or [])


def event_log_is(records: Iterable[Record]) -> dict[str, list[float]]:
    """The recorded `log_is_ratio` of every scored rollback event, by kind (shallow / deep / exhausted)."""
    by_kind: dict[str, list[float]] = {}
    for splice in record_splices(records):
        by_kind.setdefault(splice.kind, []).append(splice.log_is)
    return by_kind


def format_log_ratio(value: float) -> str:
    """Signed; three decimals below 10 in size, one above (whole spans reach -50)."""
    return f"{value:+.3f}" if abs(value) < 10 else f"{value:+.1f}"


def token_table(scored: list[ScoredTrajectory]) -> str:
    """Per-token d on spliced tokens (by kind) and on control tokens, as Markdown."""
    rows: list[tuple[str, list[float]]] = []
    for kind in SPAN_KINDS:
        values = [d for t in scored for s in t.spans if s.kind == kind for d in s.deltas]
        if values:
            rows.append((f"spliced, {KIND_LABELS[kind]}", values))
    control = [d for t in scored for d in t.control_deltas]
    if control:
        rows.append(("control (not spliced)", control))
    lines = ["| tokens | n | d mean | p10 | p50 | p90 | min |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, values in rows:
        dist = Distribution.of(values)
        lines.append(
            f"| {name} | {dist.n} | {format_log_ratio(dist.mean)} | {format_log_ratio(dist.p10)} | {format_log_ratio(dist.p50)} | {format_log_ratio(dist.p90)} | "
            f"{format_log_ratio(dist.low)} |"
        )
    return "\n".join(lines)


def span_table(log_is_by_kind: Mapping[str, list[float]]) -> str:
    """Per-rollback log IS ratio by kind, as Markdown."""
    lines = [
        f"| rollbacks | n | log IS mean | p10 | p50 | p90 | min … max | IS < {LOW_IS} | IS > {HIGH_IS:g} |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for kind in SPAN_KINDS:
        values = log_is_by_kind.get(kind) or []
        if not values:
            continue
        dist = Distribution.of(values)
        below, above = share_outside(values)
        lines.append(
            f"| {KIND_LABELS[kind]} | {dist.n} | {format_log_ratio(dist.mean)} | {format_log_ratio(dist.p10)} | {format_log_ratio(dist.p50)} | "
            f"{format_log_ratio(dist.p90)} | {format_log_ratio(dist.low)} … {format_log_ratio(dist.high)} | {below:.0%} | {above:.0%} |"
        )
    return "\n".join(lines)


def gate_table(splices: list[ScoredSplice]) -> str:
    """The scored splices as a gate sees them, by its decision (measured only: no decision), as Markdown: the
    sequence statistic (log IS) and the per-token one (mean d over the scored tokens), to choose τ from."""
    lines = [
        "| decision | n | log IS p10 | p50 | p90 | mean d per token p10 | p50 | p90 | d per token, all tokens |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for decision in ("replace", "append", None):
        group = [splice for splice in splices if splice.decision == decision]
        metrics = gate_metrics(group)
        if not metrics:
            continue
        cells = [decision or "measured only", f"{len(group)}"]
        cells += [format_log_ratio(metrics[f"log_ratio_p{q}"]) for q in (10, 50, 90)]
        cells += [format_log_ratio(metrics[key]) if key in metrics else "–" for key in (
            "per_token_p10", "per_token_p50", "per_token_p90", "log_ratio_per_token_mean")]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def offpolicy_markdown(scored: list[ScoredTrajectory]) -> str:
    """The section `make demo` and `benchmarks/offpolicy.py` print."""
    if not any(t.spans for t in scored):
        return "Off-policy spliced tokens: no rollback spliced any tokens in, nothing to score."
    by_kind: dict[str, list[float]] = {}
    for trajectory in scored:
        for span in trajectory.spans:
            by_kind.setdefault(span.kind, []).append(span.log_is)
    return "\n".join(
        [
            "Off-policy spliced tokens: d = log π(token | purified context) − log π(token | context it was sampled "
            "in), temperature-1 log-probs of the serving model; control = model tokens SAAR did not splice.",
            "",
            token_table(scored),
            "",
            "Per rollback, log IS = Σ d over the tokens it spliced in:",
            "",
            span_table(by_kind),
        ]
    )
