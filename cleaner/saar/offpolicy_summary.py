"""The numbers that say how off-policy SAAR's splices are, defined once for every place that shows them.

The trainer's `rollback/offpolicy/*` and `rollback/is_gate/*` metrics (`cleaner.verl.offpolicy_metrics`,
`cleaner.verl.trainer_metrics`), `cleaner rollout`'s summary and the benchmarks' tables
(`cleaner.analysis.offpolicy`) and the report (`cleaner.report.page`) all take their groups, constants and
statistics from here.

Per spliced token, d = log π(token | purified context) − log π_b(token | context it was sampled in); per span
(the tokens one rollback spliced in), log IS = Σ d, the sequence-level importance ratio. Typical spans sit at
log IS −2 … −50, so every span statistic is taken in log space (the ratio itself would read 0). Most spliced
tokens have d ≈ 0 and a few reach −10, so the per-token statistics give the median and the low tail, not only
the mean.

Groups: `shallow` and `deep` (the splices of recovered positions; together `spliced`), `exhausted` (the kept
last attempt of a position whose retries never succeeded: sampled after every failed attempt and error, kept
apart because it is no replacement), and `control` (trained tokens outside every span: the train/inference
numerics alone).

Pure: numbers in, numbers out; no verl, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from cleaner.saar.offpolicy import SCORING_FAILURE_KINDS

# The Plan B gate's scale: spans whose IS ratio leaves [0.5, 2] are the ones a gate or a truncation acts on.
LOW_IS, HIGH_IS = 0.5, 2.0
SPAN_QUANTILES = (10, 50, 90)  # percent, of per-span log IS
TOKEN_QUANTILES = (10, 50)  # percent, of per-token d (its p90 is ~0 on spliced tokens; the tail is the minimum)
RECOVERED_KINDS = ("shallow", "deep")
SPAN_KINDS = (*RECOVERED_KINDS, "exhausted")
KIND_LABELS = {"shallow": "shallow", "deep": "deep", "exhausted": "not recovered (last attempt kept)"}
SPLICED, CONTROL = "spliced", "control"
GROUPS = (SPLICED, *SPAN_KINDS, CONTROL)


def kind_of_mode(mode: str) -> str:
    """The span kind of a rollback event's mode (an unrecovered position's is "failed")."""
    return "exhausted" if mode == "failed" else mode


def groups_of_kind(kind: str | None) -> tuple[str, ...]:
    """The groups a span of `kind` counts in; a span recorded without its kind counts in `spliced` only."""
    if kind in RECOVERED_KINDS:
        return (SPLICED, kind)
    if kind == "exhausted":
        return (kind,)
    return (SPLICED,)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty sequence, q in [0, 1]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Distribution:
    n: int
    mean: float
    p10: float
    p50: float
    p90: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        return cls(
            len(values), fmean(values), quantile(values, 0.1), quantile(values, 0.5), quantile(values, 0.9),
            min(values), max(values),
        )  # fmt: skip


def share_outside(log_is: Sequence[float]) -> tuple[float, float]:
    """Shares of spans whose IS ratio is below LOW_IS and above HIGH_IS."""
    below = sum(1 for x in log_is if x < math.log(LOW_IS))
    above = sum(1 for x in log_is if x > math.log(HIGH_IS))
    return below / len(log_is), above / len(log_is)


def group_metrics(spans: Sequence[Sequence[float]]) -> dict[str, float]:
    """One group's statistics from the per-token d of each of its spans (empty spans ignored; no token: {}).

    `tokens`, `log_ratio_mean` / `log_ratio_p10` / `log_ratio_p50` / `log_ratio_min` (per token d), `spans`,
    `span_log_is_p10` / `p50` / `p90` (per-span log IS), `span_share_below_0.5`, `span_share_above_2`.
    """
    spans = [span for span in spans if len(span)]
    if not spans:
        return {}
    tokens = [d for span in spans for d in span]
    log_is = [math.fsum(span) for span in spans]
    below, above = share_outside(log_is)
    metrics = {"tokens": float(len(tokens)), "log_ratio_mean": fmean(tokens)}
    metrics.update({f"log_ratio_p{q}": quantile(tokens, q / 100) for q in TOKEN_QUANTILES})
    metrics["log_ratio_min"] = min(tokens)
    metrics["spans"] = float(len(spans))
    metrics.update({f"span_log_is_p{q}": quantile(log_is, q / 100) for q in SPAN_QUANTILES})
    metrics[f"span_share_below_{LOW_IS}"] = below
    metrics[f"span_share_above_{HIGH_IS:g}"] = above
    return metrics


def offpolicy_group_metrics(spans_by_group: Mapping[str, Sequence[Sequence[float]]]) -> dict[str, float]:
    """`<group>/<stat>` for every group with a token, in GROUPS order."""
    return {
        f"{group}/{stat}": value
        for group in GROUPS
        for stat, value in group_metrics(spans_by_group.get(group) or []).items()
    }


@dataclass(frozen=True)
class ScoredSplice:
    """One rollback event whose splice was scored in its purified context (the gate, or the measurement)."""

    kind: str
    log_is: float  # Σ d over the scored tokens: what the `sequence` gate compares with log τ
    tokens: int | None  # scored tokens (None in records written before the count was kept)
    decision: str | None  # the gate's "replace" / "append"; None when only measured

    @property
    def per_token(self) -> float | None:
        """Mean d over the scored tokens: the reference code's statistic (before its clamp to [−3, 3])."""
        return self.log_is / self.tokens if self.tokens else None


def scored_splices(events: Iterable[Mapping[str, Any]]) -> list[ScoredSplice]:
    """The scored events among rollback events (`saar_rollback_events` entries)."""
    return [
        ScoredSplice(
            kind_of_mode(str(event["mode"])),
            float(event["log_is_ratio"]),
            int(event["is_tokens"]) if event.get("is_tokens") is not None else None,
            event.get("is_decision"),
        )
        for event in events
        if event.get("log_is_ratio") is not None
    ]


def gate_metrics(splices: Sequence[ScoredSplice]) -> dict[str, float]:
    """The gate's own inputs, to choose τ from: `scored`, `log_ratio_p10/p50/p90` (per-splice log IS, the
    `sequence` statistic), `log_ratio_per_token_mean` (Σ log IS / Σ scored tokens) and
    `per_token_p10/p50/p90` (each splice's mean d, the `token_mean` statistic before its clamp). Empty: {}."""
    if not splices:
        return {}
    log_is = [splice.log_is for splice in splices]
    metrics = {"scored": float(len(splices))}
    metrics.update({f"log_ratio_p{q}": quantile(log_is, q / 100) for q in SPAN_QUANTILES})
    counted = [splice for splice in splices if splice.tokens]
    if counted:
        metrics["log_ratio_per_token_mean"] = math.fsum(s.log_is for s in counted) / sum(s.tokens for s in counted)
        per_token = [splice.per_token for splice in counted]
        metrics.update({f"per_token_p{q}": quantile(per_token, q / 100) for q in SPAN_QUANTILES})
    return metrics


def scoring_failure_metrics(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """`scoring_failed`: positions that could not be scored (the gate appended them; measured ones were purified
    unmeasured), and `scoring_failed/<kind>` by why (`cleaner.saar.offpolicy.SCORING_FAILURE_KINDS`). Every key is
    present (0 when nothing failed) once a position was scored or failed; empty when none was."""
    events = list(events)
    if not any(event.get("log_is_ratio") is not None or event.get("is_error") is not None for event in events):
        return {}
    failed = [event for event in events if event.get("is_error") is not None]
    metrics = {"scoring_failed": float(len(failed))}
    for kind in SCORING_FAILURE_KINDS:
        metrics[f"scoring_failed/{kind}"] = float(sum(event.get("is_failure") == kind for event in failed))
    return metrics
