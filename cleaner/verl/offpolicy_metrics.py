"""`rollback/offpolicy/*`: how far the tokens SAAR spliced in are from the policy the trainer scores them with.

With rollout log-probs on (`actor_rollout_ref.rollout.calculate_log_probs=True`), each trained response token
has two log-probs: the one the server reported when it sampled the token (behaviour policy, in the context the
token was sampled in) and `old_log_probs`, which the trainer recomputes on the final, purified sequence. Per token

    d = old_log_prob - rollout_log_prob.

On spliced tokens (the `saar_spliced_spans` of each trajectory) d measures the gap SAAR opens: the token was sampled
in a context that still held the failed attempt and its error. On every other trained token (the control) both
contexts are the same, so d measures only the train/inference numerics; the control's spans are the runs of
trained tokens outside spliced spans (the model's other turns).

This module only reads the tensors into per-span lists of d; the groups (`spliced` = shallow + deep, `shallow`,
`deep`, `exhausted`, `control`) and every statistic are `cleaner.saar.offpolicy_summary`'s. Read-only: the
tensors are read, never written, so the loss is what it is without these metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cleaner.saar.offpolicy_summary import CONTROL, groups_of_kind, offpolicy_group_metrics

OFFPOLICY = "rollback/offpolicy/"


@dataclass(frozen=True)
class OffpolicyRow:
    """One trajectory's response side: recomputed and rollout log-probs, loss mask, spliced spans."""

    old_log_probs: torch.Tensor  # (response,)
    rollout_log_probs: torch.Tensor  # (response,)
    response_mask: torch.Tensor  # (response,)
    spliced_spans: Sequence[Sequence[Any]]  # [start, end, attempt, kind] (kind absent: counted in `spliced` only)


def offpolicy_metrics(rows: Iterable[OffpolicyRow], prefix: str = "") -> dict[str, float]:
    """The step's `rollback/offpolicy/*` metrics (empty when no row has a trained token)."""
    spans: dict[str, list[list[float]]] = {}
    for row in rows:
        _add_row(row, spans)
    return {f"{prefix}{OFFPOLICY}{name}": value for name, value in offpolicy_group_metrics(spans).items()}


def _add_row(row: OffpolicyRow, spans: dict[str, list[list[float]]]) -> None:
    with torch.no_grad():
        log_ratios = (row.old_log_probs.double() - row.rollout_log_probs.double()).cpu().numpy()
        trained = row.response_mask.bool().cpu().numpy()
    length = len(trained)
    outside = trained.copy()
    for span in row.spliced_spans:
        start, end = int(span[0]), min(int(span[1]), length)
        if start >= end:
            continue
        deltas = log_ratios[np.arange(start, end)[trained[start:end]]].tolist()
        outside[start:end] = False
        for group in groups_of_kind(str(span[3]) if len(span) > 3 else None):
            spans.setdefault(group, []).append(deltas)
    for start, end in _runs(outside):
        spans.setdefault(CONTROL, []).append(log_ratios[start:end].tolist())


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of True."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))
