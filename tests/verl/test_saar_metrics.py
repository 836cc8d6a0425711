"""cleaner.verl.saar_metrics: per-trajectory SAAR stats -> the rollback/* and tool_calls/* metrics a step logs."""

from __future__ import annotations

import numpy as np
import pytest

from cleaner.saar.outcome import ErrorCategory
from cleaner.saar.stats import EXTRA_FIELD_KEYS, RollbackEvent, SplicedSpan, TrajectoryStats
from cleaner.verl.saar_metrics import SaarStatsError, aggregate_saar_metrics, rows_from_columns


def recovered_shallow_trajectory() -> dict:
    """Two calls at one position: the first raised NameError, the retry succeeded and was spliced in."""
    stats = TrajectoryStats(
        rollback_enabled=1,
        tool_calls=3,
        first_attempt_calls=2,
        first_attempt_successes=1,
        rollbacks_triggered=1,
        rollbacks_recovered=1,
        rollbacks_shallow=1,
        retries_used=1,
        resampled_tokens=40,
        spliced_tokens=12,
        response_tokens=100,
    )
    stats.count_failure(ErrorCategory.EXCEPTION)
    stats.spliced_spans.append(SplicedSpan(10, 22, 1, "shallow"))
    stats.rollback_events.append(
        RollbackEvent(0, "print(x)", "exception", "NameError", "NameError: x", "print(1)", 0.8, "shallow", 1, 40)
    )
    return stats.to_extra_fields()


def failed_trajectory() -> dict:
    """One position failed three times (syntax error then two timeouts); an infra error happened elsewhere
    and drop_infra_error_trajectories zeroed its loss mask."""
    stats = TrajectoryStats(
        rollback_enabled=1,
        tool_calls=5,
        first_attempt_calls=2,
        first_attempt_successes=0,
        rollbacks_triggered=1,
        rollbacks_failed=1,
        retries_used=3,
        resampled_tokens=90,
        response_tokens=300,
        infra_errors=1,
        infra_dropped=1,
    )
    stats.count_failure(ErrorCategory.SYNTAX_ERROR)
    stats.count_failure(ErrorCategory.TIMEOUT)
    stats.count_failure(ErrorCategory.TIMEOUT)
    stats.count_failure(ErrorCategory.JUDGE_UNREACHABLE)
    return stats.to_extra_fields()


def deep_trajectory() -> dict:
    stats = TrajectoryStats(
        rollback_enabled=1,
        tool_calls=2,
        first_attempt_calls=1,
        first_attempt_successes=0,
        rollbacks_triggered=1,
        rollbacks_recovered=1,
        rollbacks_deep=1,
        retries_used=1,
        resampled_tokens=50,
        spliced_tokens=50,
        response_tokens=100,
        deep_mentions_error=1,
    )
    stats.count_failure(ErrorCategory.BAD_CALL)
    return stats.to_extra_fields()


def no_rollback_trajectory() -> dict:
    return TrajectoryStats(
        tool_calls=1, first_attempt_calls=1, first_attempt_successes=1, response_tokens=500
    ).to_extra_fields()


def test_sums_and_ratios_over_a_step():
    metrics = aggregate_saar_metrics(
        [recovered_shallow_trajectory(), failed_trajectory(), deep_trajectory(), no_rollback_trajectory()]
    )
    assert metrics["rollback/trajectories"] == 4
    assert metrics["rollback/enabled_fraction"] == 0.75
    assert metrics["rollback/triggered"] == 3
    assert metrics["rollback/recovered"] == 2
    assert metrics["rollback/failed"] == 1
    assert metrics["rollback/recovery_rate"] == pytest.approx(2 / 3)
    assert (metrics["rollback/shallow"], metrics["rollback/deep"]) == (1, 1)
    assert metrics["rollback/deep_fraction"] == 0.5
    assert metrics["rollback/retries"] == 5
    assert metrics["rollback/retries_per_rollback"] == pytest.approx(5 / 3)
    assert metrics["rollback/resampled_tokens"] == 180
    assert metrics["rollback/resampled_token_ratio"] == pytest.approx(180 / 1000)
    # token-weighted over the step, not a mean of per-trajectory fractions (which would be 0.155)
    assert metrics["rollback/spliced_token_fraction"] == pytest.approx(62 / 1000)
    assert metrics["rollback/deep_mentions_error"] == 1
    assert metrics["rollback/infra_errors"] == 1
    assert metrics["rollback/infra_error_trajectories"] == 1
    assert metrics["rollback/infra_dropped_trajectories"] == 1
    assert metrics["rollback/trajectories_with_rollback"] == 3
    assert metrics["tool_calls/total"] == 11
    assert metrics["tool_calls/per_trajectory"] == 2.75
    assert metrics["tool_calls/first_attempt"] == 6
    assert metrics["tool_calls/first_attempt_success_rate"] == pytest.approx(2 / 6)
    assert metrics["tool_calls/failure_reason/timeout"] == 2
    assert metrics["tool_calls/failure_reason/judge_unreachable"] == 1
    assert metrics["tool_calls/failure_reason/memory_limit"] == 0
    assert {f"tool_calls/failure_reason/{c.value}" for c in ErrorCategory} <= metrics.keys()
    assert all(isinstance(value, float) for value in metrics.values())


def test_rates_with_zero_denominator_are_left_out_not_zero():
    metrics = aggregate_saar_metrics([TrajectoryStats().to_extra_fields()])
    assert metrics["rollback/triggered"] == 0
    assert metrics["rollback/infra_dropped_trajectories"] == 0
    assert metrics["tool_calls/total"] == 0
    for undefined in ("rollback/recovery_rate", "rollback/deep_fraction", "tool_calls/first_attempt_success_rate"):
        assert undefined not in metrics
    # spliced fraction over zero response tokens is undefined too
    assert "rollback/spliced_token_fraction" not in metrics


def test_validation_prefix():
    metrics = aggregate_saar_metrics([recovered_shallow_trajectory()], prefix="val-aux/")
    assert metrics["val-aux/rollback/recovered"] == 1
    assert all(key.startswith("val-aux/") for key in metrics)


def test_stock_loop_trajectories_are_skipped_and_all_stock_gives_nothing():
    stock = {key: None for key in EXTRA_FIELD_KEYS}  # how verl None-fills a missing column
    assert aggregate_saar_metrics([stock, {}]) == {}
    metrics = aggregate_saar_metrics([stock, recovered_shallow_trajectory()])
    assert metrics["rollback/trajectories"] == 1
    assert metrics["tool_calls/total"] == 3


def test_partial_contract_is_an_error_naming_the_key():
    row = recovered_shallow_trajectory()
    del row["saar_retries_used"]
    with pytest.raises(SaarStatsError, match="saar_retries_used"):
        aggregate_saar_metrics([row])


def test_rows_from_numpy_columns_like_a_dataproto():
    trajectories = [recovered_shallow_trajectory(), deep_trajectory()]
    columns = {}
    for key in trajectories[0]:
        column = np.empty(len(trajectories), dtype=object)
        column[:] = [t[key] for t in trajectories]
        columns[key] = column
    columns["__num_turns__"] = np.array([4, 6])
    rows = rows_from_columns(columns)
    assert aggregate_saar_metrics(rows) == aggregate_saar_metrics(trajectories)
    assert rows_from_columns({"__num_turns__": np.array([4])}) == []


def test_is_gate_decisions_under_ours_and_the_references_names():
    """rollback_is_threshold (Plan B): positions appended (failure kept) and replaced, summed over the step."""
    appended = {**recovered_shallow_trajectory(), "saar_planb_appends": 2, "saar_planb_replaces": 1}
    replaced = {**deep_trajectory(), "saar_planb_appends": 0, "saar_planb_replaces": 1}
    metrics = aggregate_saar_metrics([appended, replaced])
    assert (metrics["rollback/is_gate_appended"], metrics["rollback/is_gate_replaced"]) == (2, 2)
    assert metrics["rollback/is_gate_append_rate"] == 0.5
    assert metrics["rollback/planb_append_count"] == 2 and metrics["rollback/planb_replace_count"] == 2
    assert metrics["rollback/planb_append_rate"] == 0.5
    # no decision in the step (or the gate off): counts 0, the rate left out
    metrics = aggregate_saar_metrics([deep_trajectory()])
    assert (metrics["rollback/planb_append_count"], metrics["rollback/is_gate_replaced"]) == (0, 0)
    assert "rollback/planb_append_rate" not in metrics and "rollback/is_gate_append_rate" not in metrics
