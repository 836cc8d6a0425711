"""cleaner.saar.offpolicy_summary: the one definition of the off-policy groups and statistics."""

from __future__ import annotations

import math

import pytest

from cleaner.saar import offpolicy_summary as summary


def test_exhausted_spans_are_kept_apart_from_spliced_and_unknown_kinds_count_as_spliced():
    assert summary.groups_of_kind("shallow") == ("spliced", "shallow")
    assert summary.groups_of_kind("deep") == ("spliced", "deep")
    assert summary.groups_of_kind("exhausted") == ("exhausted",)
    assert summary.groups_of_kind(None) == ("spliced",)
    assert summary.kind_of_mode("failed") == "exhausted"


def test_span_quantiles_are_taken_in_log_space_where_the_measured_spans_live():
    """The demo's spans sit at log IS -1.6 ... -51: as ratios every quantile would read 0."""
    spans = [[-0.0, -10.0, -0.1], [-30.0], [-1.0, -0.5]]
    metrics = summary.group_metrics(spans)
    assert metrics["span_log_is_p50"] == pytest.approx(-10.1)
    assert metrics["span_log_is_p10"] == pytest.approx(-30 + 0.2 * 19.9)
    assert metrics["span_share_below_0.5"] == 1 and metrics["span_share_above_2"] == 0
    # per token: the median is near 0, the tail is in the minimum
    assert metrics["tokens"] == 6 and metrics["log_ratio_min"] == -30
    assert metrics["log_ratio_p50"] == pytest.approx(-0.75)
    assert metrics["log_ratio_mean"] == pytest.approx(-41.6 / 6)
    assert summary.group_metrics([[], []]) == {}


def test_group_metrics_are_named_per_group_in_a_fixed_order():
    metrics = summary.offpolicy_group_metrics({"control": [[0.0]], "exhausted": [[-1.0]], "unknown": [[5.0]]})
    assert list(metrics)[0] == "exhausted/tokens" and "control/tokens" in metrics
    assert not [key for key in metrics if key.startswith("unknown/")]


def test_gate_metrics_give_both_statistics_a_gate_can_compare_with_log_tau():
    events = [
        {"mode": "deep", "log_is_ratio": -6.0, "is_tokens": 3, "is_decision": "append"},
        {"mode": "shallow", "log_is_ratio": -1.0, "is_tokens": 10, "is_decision": "replace"},
        {"mode": "failed", "log_is_ratio": None},  # not scored
        {"mode": "failed", "log_is_ratio": -2.0, "is_tokens": 1, "is_decision": None},  # measured only
    ]
    splices = summary.scored_splices(events)
    assert [splice.kind for splice in splices] == ["deep", "shallow", "exhausted"]
    metrics = summary.gate_metrics(splices)
    assert metrics["scored"] == 3
    assert metrics["log_ratio_p50"] == -2.0  # sequence sums: -6, -2, -1
    assert metrics["per_token_p50"] == -2.0  # per-splice means: -2, -0.1, -2
    assert metrics["log_ratio_per_token_mean"] == pytest.approx(-9 / 14)
    assert summary.gate_metrics([]) == {}


def test_share_outside_uses_the_gates_scale():
    assert summary.share_outside([math.log(0.4), math.log(1.0), math.log(3.0), math.log(0.5)]) == (0.25, 0.25)


def test_scoring_failures_are_counted_by_why_beside_the_scored_positions():
    scored = {"mode": "deep", "log_is_ratio": -1.0, "is_tokens": 4, "is_decision": "replace", "is_error": None}
    refused = {
        "mode": "shallow",
        "log_is_ratio": None,
        "is_decision": "append",
        "is_error": "refused: ...",
        "is_failure": "refused",
    }
    nan = {**refused, "is_error": "behaviour log-prob nan", "is_failure": "non_finite"}
    unscored = {"mode": "failed", "log_is_ratio": None, "is_error": None}  # scoring off for this position
    metrics = summary.scoring_failure_metrics([scored, refused, nan, nan, unscored])
    assert metrics == {
        "scoring_failed": 3.0,
        "scoring_failed/aborted": 0.0,
        "scoring_failed/refused": 1.0,
        "scoring_failed/non_finite": 2.0,
    }
    assert summary.scoring_failure_metrics([scored])["scoring_failed"] == 0.0  # scoring ran and nothing failed: a 0
    assert summary.scoring_failure_metrics([unscored]) == {}  # nothing was scored: no metric
