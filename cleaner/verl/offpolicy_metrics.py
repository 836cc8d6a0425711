"""`rollback/offpolicy/*`: how far the tokens SAAR spliced in are from the policy the trainer scores them with.

With rollout log-probs on (`actor_rollout_ref.rollout.calculate_log_probs=True`), each trained response token
has two log-probs: the one the server reported when it sampled the token (behaviour policy, in the context the
token was sampled in) and `old_log_probs`, which the trainer recomputes on the final, purified sequence. Per token

    d = old_log_prob - rollout_log_prob.

On spliced tokens (the `saar_spliced_spans` of each trajectory) d measures the gap SAAR opens: the token was sampled
in a context that still held the failed attempt and its error. On every other trained token (the control) both
contexts are the same, so d measures only the train/inference numerics. Per span, log IS = sum of d over its
trained tokens is the sequence-level importance ratio (the reference's Plan B ratio); the control's spans are the
runs of trained tokens outside spliced spans (the model's other turns).

Groups: `spliced` (every span), `shallow`, `deep`, `exhausted` (the kept attempt of a position whose retries never
succeeded), and `control`. Per group, when it has tokens: `tokens`, `log_ratio_mean` (per token), `spans`,
`span_is_p10`/`p50`/`p90` (quantiles of exp(log IS)), `span_share_below_0.5`, `span_share_above_2`.

Read-only: the tensors are read, never written, so the loss is what it is without these metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

OFFPOLICY = "rollback/offpolicy/"
SPLICED, CONTROL = "spliced", "control"
SPAN_KINDS = ("shallow", "deep", "exhausted")
LOW_IS, HIGH_IS = 0.5, 2.0
QUANTILES = (10, 50, 90)
_MAX_LOG = 700.0  # exp() of more overflows a float64; such a ratio is reported as exp(700)


@dataclass(frozen=True)
class OffpolicyRow:
    """One trajectory's response side: recomputed and rollout log-probs, loss mask, spliced spans."""

    old_log_probs: torch.Tensor  # (response,)
    rollout_log_probs: torch.Tensor  # (response,)
    response_mask: torch.Tensor  # (response,)
    spliced_spans: Sequence[Sequence[Any]]  # [start, end, attempt, kind] (kind absent: counted in `spliced` only)


@dataclass
class _Group:
    token_log_ratios: list[float] = field(default_factory=list)
    span_log_is: list[float] = field(default_factory=list)

    def add_span(self, log_ratios: np.ndarray) -> None:
        if log_ratios.size:
            self.token_log_ratios.extend(log_ratios.tolist())
            self.span_log_is.append(float(log_ratios.sum()))

    def metrics(self) -> dict[str, float]:
        if not self.token_log_ratios:
            return {}
        ratios = np.exp(np.minimum(np.asarray(self.span_log_is), _MAX_LOG))
        metrics = {
            "tokens": float(len(self.token_log_ratios)),
            "log_ratio_mean": float(np.mean(self.token_log_ratios)),
            "spans": float(len(ratios)),
            f"span_share_below_{LOW_IS}": float(np.mean(ratios < LOW_IS)),
            f"span_share_above_{HIGH_IS:g}": float(np.mean(ratios > HIGH_IS)),
        }
        metrics.update({f"span_is_p{q}": float(np.percentile(ratios, q)) for q in QUANTILES})
        return metrics


def offpolicy_metrics(rows: Iterable[OffpolicyRow], prefix: str = "") -> dict[str, float]:
    """The step's `rollback/offpolicy/*` metrics (empty when no row has a trained token)."""
    groups = {name: _Group() for name in (SPLICED, *SPAN_KINDS, CONTROL)}
    for row in rows:
        _add_row(row, groups)
    return {
        f"{prefix}{OFFPOLICY}{name}/{stat}": value
        for name, group in groups.items()
        for stat, value in group.metrics().items()
    }


def _add_row(row: OffpolicyRow, groups: dict[str, _Group]) -> None:
    with torch.no_grad():
        log_ratios = (row.old_log_probs.double() - row.rollout_log_probs.double()).cpu().numpy()
        trained = row.response_mask.bool().cpu().numpy()
    length = len(trained)
    outside = trained.copy()
    for span in row.spliced_spans:
        start, end = int(span[0]), min(int(span[1]), length)
        if start >= end:
            continue
        in_span = np.arange(start, end)[trained[start:end]]
        outside[start:end] = False
        groups[SPLICED].add_span(log_ratios[in_span])
        kind = str(span[3]) if len(span) > 3 else None
        if kind in groups and kind not in (SPLICED, CONTROL):
            groups[kind].add_span(log_ratios[in_span])
    for start, end in _runs(outside):
        groups[CONTROL].add_span(log_ratios[start:end])


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of True."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))
