"""The `rollback/*` and `tool_calls/*` metrics a trainer step logs, from its trajectories' `saar_*` fields.

Every number is a statistic of `cleaner.saar.aggregate.summarize_saar` (the definition `cleaner rollout`,
`cleaner eval` and the report use too), under the trainer's metric names. A ratio whose denominator is zero
is left out rather than logged as 0, which would read as "everything failed".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cleaner.saar.aggregate import SaarStatsError, SaarSummary, summarize_saar
from cleaner.saar.stats import SCALAR_EXTRA_FIELD_KEYS

__all__ = ["SaarStatsError", "aggregate_saar_metrics", "rows_from_columns"]

ROLLBACK = "rollback/"
TOOL_CALLS = "tool_calls/"
# Prefix for the same metrics computed on validation rollouts (verl's own auxiliary validation section).
VALIDATION_PREFIX = "val-aux/"


def _rollback_metrics(summary: SaarSummary) -> dict[str, float | None]:
    return {
        "trajectories": summary.trajectories,
        "enabled_fraction": summary.enabled_fraction,
        "triggered": summary.total("rollbacks_triggered"),
        "recovered": summary.total("rollbacks_recovered"),
        "failed": summary.total("rollbacks_failed"),
        "shallow": summary.total("rollbacks_shallow"),
        "deep": summary.total("rollbacks_deep"),
        "retries": summary.total("retries_used"),
        "resampled_tokens": summary.total("resampled_tokens"),
        "spliced_tokens": summary.total("spliced_tokens"),
        "deep_mentions_error": summary.total("deep_mentions_error"),
        "infra_errors": summary.total("infra_errors"),
        "infra_error_trajectories": summary.infra_error_trajectories,
        "trajectories_with_rollback": summary.trajectories_with_rollback,
        "recovery_rate": summary.recovery_rate,
        "rollback_rate": summary.rollback_rate,
        "deep_fraction": summary.deep_fraction,
        "retries_per_rollback": summary.retries_per_rollback,
        "spliced_token_fraction": summary.spliced_token_fraction,
        "resampled_token_ratio": summary.resampled_token_ratio,
    }


def _tool_call_metrics(summary: SaarSummary) -> dict[str, float | None]:
    metrics: dict[str, float | None] = {
        "total": summary.total("tool_calls"),
        "per_trajectory": summary.per_trajectory("tool_calls"),
        "first_attempt": summary.total("first_attempt_calls"),
        "first_attempt_successes": summary.total("first_attempt_successes"),
        "first_attempt_success_rate": summary.first_attempt_success_rate,
        "errors_sampled": summary.errors_sampled,
        "errors_kept": summary.errors_kept,
    }
    for category, count in summary.failures().items():
        metrics[f"failure_reason/{category.value}"] = count
    return metrics


def aggregate_saar_metrics(rows: Sequence[Mapping[str, Any]], prefix: str = "") -> dict[str, float]:
    """The `rollback/*` and `tool_calls/*` metrics of one step's trajectories (empty if none has SAAR stats).

    Trajectories without SAAR stats (stock agent loops in a mixed batch) are left out of every metric.
    """
    summary = summarize_saar(rows)
    if summary is None:
        return {}
    groups = ((ROLLBACK, _rollback_metrics(summary)), (TOOL_CALLS, _tool_call_metrics(summary)))
    return {
        f"{prefix}{group}{name}": float(value)
        for group, metrics in groups
        for name, value in metrics.items()
        if value is not None
    }


def rows_from_columns(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Per-trajectory rows from column-wise data such as `DataProto.non_tensor_batch`.

    Only the scalar `saar_*` columns are read; a batch without any of them gives rows without SAAR stats.
    """
    present = [key for key in SCALAR_EXTRA_FIELD_KEYS if key in columns]
    if not present:
        return []
    lengths = {len(columns[key]) for key in present}
    if len(lengths) != 1:
        raise SaarStatsError(f"saar_* columns have different lengths: { {k: len(columns[k]) for k in present} }")
    (length,) = lengths
    return [{key: columns[key][index] for key in present} for index in range(length)]
