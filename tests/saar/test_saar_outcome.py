import pytest

from cleaner.saar.config import SaarConfig, SaarConfigError
from cleaner.saar.outcome import INFRA_ERROR_CATEGORIES, JUDGE_INFRA_REASONS, ErrorCategory, OutcomeKind, ToolOutcome
from cleaner.saar.policy import Action, RollbackPolicy
from cleaner.saar.stats import TrajectoryStats


def test_a_starved_program_is_an_infra_outcome_and_never_rolled_back():
    """`worker_starved`: killed by the wall cap while it had CPU budget left, i.e. the judge was overloaded."""
    category = JUDGE_INFRA_REASONS["worker_starved"]
    assert category is ErrorCategory.WORKER_STARVED and category in INFRA_ERROR_CATEGORIES
    outcome = ToolOutcome.infra_error(category, detail="wall cap with cpu budget left")
    assert outcome.kind is OutcomeKind.INFRA_ERROR
    with pytest.raises(ValueError, match="infra_error"):
        ToolOutcome.model_error(category)
    with pytest.raises(SaarConfigError, match="infrastructure error"):
        SaarConfig.from_multi_turn({"rollback_on_errors": ["worker_starved"]})
    stats = TrajectoryStats()
    policy = RollbackPolicy(SaarConfig(enable_tool_rollback=True), True, stats)
    assert policy.on_round([outcome], position=0, code="x", feedback="") is Action.CONTINUE
    assert (stats.rollbacks_triggered, stats.infra_errors, stats.failures[category]) == (0, 1, 1)


def test_every_judge_infra_reason_maps_to_an_infra_category():
    assert set(JUDGE_INFRA_REASONS) == {"queue_timeout", "internal_error", "invalid_input", "worker_starved"}
    assert all(category in INFRA_ERROR_CATEGORIES for category in JUDGE_INFRA_REASONS.values())
