"""Aggregate per-trajectory SAAR stats (the `saar_*` extra_fields) into the metrics a trainer step logs.

Counts are sums over the trajectories of one step; rates and fractions are ratios of those sums (so a
trajectory with many calls weighs more than one with few). A rate whose denominator is zero is left
out rather than logged as 0, which would read as "everything failed".

Pure: no verl, no torch. Rows are mappings from `saar_*` keys to values, one per trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cleaner.saar.outcome import ErrorCategory
from cleaner.saar.stats import PREFIX, SCALAR_EXTRA_FIELD_KEYS

ROLLBACK = "rollback/"
TOOL_CALLS = "tool_calls/"
# Prefix for the same metrics computed on validation rollouts (verl's own auxiliary validation section).
VALIDATION_PREFIX = "val-aux/"


class SaarStatsError(ValueError):
    """A trajectory carries only part of the `saar_*` contract (see cleaner/saar/stats.py)."""


def has_saar_stats(row: Mapping[str, Any]) -> bool:
    """True if the trajectory was produced by a SAAR agent loop.

    verl fills a column that another trajectory of the same worker chunk has with None, so a
    trajectory of a stock loop (e.g. `single_turn_agent`) mixed into the batch shows up as all-None.
    """
    return any(row.get(key) is not None for key in SCALAR_EXTRA_FIELD_KEYS)


def _counter_sums(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    sums = {key: 0 for key in SCALAR_EXTRA_FIELD_KEYS if key != PREFIX + "spliced_token_fraction"}
    for index, row in enumerate(rows):
        missing = [key for key in sums if row.get(key) is None]
        if missing:
            raise SaarStatsError(f"trajectory {index} has SAAR stats but lacks {missing}")
        for key in sums:
            sums[key] += int(row[key])
    return sums


def _ratio(metrics: dict[str, float], name: str, numerator: float, denominator: float) -> None:
    if denominator > 0:
        metrics[name] = numerator / denominator


def aggregate_saar_metrics(rows: Sequence[Mapping[str, Any]], prefix: str = "") -> dict[str, float]:
    """The `rollback/*` and `tool_calls/*` metrics of one step's trajectories (empty if none has SAAR stats).

    Trajectories without SAAR stats (stock agent loops in a mixed batch) are left out of every metric.
    """
    saar_rows = [row for row in rows if has_saar_stats(row)]
    if not saar_rows:
        return {}
    sums = _counter_sums(saar_rows)

    def total(name: str) -> int:
        return sums[PREFIX + name]

    trajectories = len(saar_rows)
    rollback: dict[str, float] = {
        "trajectories": trajectories,
        "enabled_fraction": total("rollback_enabled") / trajectories,
        "triggered": total("rollbacks_triggered"),
        "recovered": total("rollbacks_recovered"),
        "failed": total("rollbacks_failed"),
        "shallow": total("rollbacks_shallow"),
        "deep": total("rollbacks_deep"),
        "retries": total("retries_used"),
        "resampled_tokens": total("resampled_tokens"),
        "spliced_tokens": total("spliced_tokens"),
        "deep_mentions_error": total("deep_mentions_error"),
        "infra_errors": total("infra_errors"),
        "infra_error_trajectories": sum(bool(row[PREFIX + "infra_error"]) for row in saar_rows),
        "trajectories_with_rollback": sum(int(row[PREFIX + "rollbacks_triggered"]) > 0 for row in saar_rows),
    }
    _ratio(rollback, "recovery_rate", total("rollbacks_recovered"), total("rollbacks_triggered"))
    _ratio(rollback, "deep_fraction", total("rollbacks_deep"), total("rollbacks_shallow") + total("rollbacks_deep"))
    _ratio(rollback, "retries_per_rollback", total("retries_used"), total("rollbacks_triggered"))
    _ratio(rollback, "spliced_token_fraction", total("spliced_tokens"), total("response_tokens"))
    _ratio(rollback, "resampled_token_ratio", total("resampled_tokens"), total("response_tokens"))

    tool_calls: dict[str, float] = {
        "total": total("tool_calls"),
        "per_trajectory": total("tool_calls") / trajectories,
        "first_attempt": total("first_attempt_calls"),
        "first_attempt_successes": total("first_attempt_successes"),
    }
    _ratio(tool_calls, "first_attempt_success_rate", total("first_attempt_successes"), total("first_attempt_calls"))
    for category in ErrorCategory:
        tool_calls[f"failure_reason/{category.value}"] = total(f"fail_{category.value}")

    return {
        **{f"{prefix}{ROLLBACK}{name}": float(value) for name, value in rollback.items()},
        **{f"{prefix}{TOOL_CALLS}{name}": float(value) for name, value in tool_calls.items()},
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
