"""The `rollback/*` and `tool_calls/*` metrics a trainer step logs, from its trajectories' `saar_*` fields.

Every number is a statistic of `cleaner.saar.aggregate.summarize_saar` (the definition `cleaner rollout`,
`cleaner eval` and the report use too), under the trainer's metric names. A ratio whose denominator is zero
is left out rather than logged as 0, which would read as "everything failed".

The reference implementation's metric names are logged too (same statistic, correct counts), so dashboards
built on them keep working: see REFERENCE_NAMES and `score_acc_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cleaner.saar.aggregate import SaarStatsError, SaarSummary, summarize_saar
from cleaner.saar.stats import SCALAR_EXTRA_FIELD_KEYS

__all__ = ["SaarStatsError", "aggregate_saar_metrics", "rows_from_columns"]

ROLLBACK = "rollback/"
TOOL_CALLS = "tool_calls/"
# The reference's name -> ours, for the same statistic.
REFERENCE_NAMES: dict[str, str] = {
    ROLLBACK + "rollback_full_turn_count": ROLLBACK + "deep",
    ROLLBACK + "rollback_tool_call_only_count": ROLLBACK + "shallow",
    TOOL_CALLS + "total_attempts": TOOL_CALLS + "first_attempt",
    TOOL_CALLS + "success_rate": TOOL_CALLS + "first_attempt_success_rate",
    ROLLBACK + "planb_append_count": ROLLBACK + "is_gate_appended",
    ROLLBACK + "planb_replace_count": ROLLBACK + "is_gate_replaced",
    ROLLBACK + "planb_append_rate": ROLLBACK + "is_gate_append_rate",
}
SCORE_ACC = "critic/score/acc"
# Prefix for the same metrics computed on validation rollouts (verl's own auxiliary validation section).
VALIDATION_PREFIX = "val-aux/"


def _rollback_metrics(summary: SaarSummary) -> dict[str, float | None]:
    appended, replaced = summary.total("planb_appends"), summary.total("planb_replaces")
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
        "infra_dropped_trajectories": summary.infra_dropped_trajectories,
        "trajectories_with_rollback": summary.trajectories_with_rollback,
        "recovery_rate": summary.recovery_rate,
        "rollback_rate": summary.rollback_rate,
        "deep_fraction": summary.deep_fraction,
        "retries_per_rollback": summary.retries_per_rollback,
        "spliced_token_fraction": summary.spliced_token_fraction,
        "resampled_token_ratio": summary.resampled_token_ratio,
        # rollback_is_threshold (Plan B): recovered positions the IS gate appended (failure kept) or replaced
        "is_gate_appended": appended,
        "is_gate_replaced": replaced,
        "is_gate_append_rate": appended / (appended + replaced) if appended + replaced else None,
        "is_scored": summary.total("is_scored"),  # splices scored in their purified context
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
    metrics = {
        f"{group}{name}": float(value) for group, named in groups for name, value in named.items() if value is not None
    }
    metrics.update({reference: metrics[ours] for reference, ours in REFERENCE_NAMES.items() if ours in metrics})
    return {prefix + name: value for name, value in metrics.items()}


def score_acc_metrics(acc_values: Sequence[Any]) -> dict[str, float]:
    """`critic/score/acc`: the share of the step's trajectories whose reward says fully correct (`acc` >= 1).

    Rows without an `acc` (None: another reward function in a mixed batch) are left out; none at all, no metric.
    """
    values = [float(value) >= 1.0 for value in acc_values if value is not None]
    return {SCORE_ACC: sum(values) / len(values)} if values else {}


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
