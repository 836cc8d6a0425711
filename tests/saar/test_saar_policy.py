import pytest

from cleaner.saar.config import SaarConfig
from cleaner.saar.offpolicy import IsScore, ScoringFailure
from cleaner.saar.outcome import ErrorCategory, ToolOutcome
from cleaner.saar.policy import Action, RollbackPolicy, draw_gate
from cleaner.saar.stats import TrajectoryStats

OK = ToolOutcome.ok()
NAME_ERROR = ToolOutcome.model_error(ErrorCategory.EXCEPTION, "NameError")
TIMEOUT = ToolOutcome.model_error(ErrorCategory.TIMEOUT)
INFRA = ToolOutcome.infra_error(ErrorCategory.QUEUE_TIMEOUT)


def policy(active=True, **overrides):
    stats = TrajectoryStats()
    return RollbackPolicy(SaarConfig(enable_tool_rollback=True, **overrides), active, stats), stats


def fail_round(p, outcome=NAME_ERROR, code="print(y)"):
    return p.on_round(
        [outcome],
        position=0,
        code=code,
        feedback=f"{outcome.exception_type}: boom",
        stream_position="cp",
        failed_turn="turn",
    )


def test_recovery_after_one_retry():
    p, stats = policy()
    assert fail_round(p) is Action.RETRY and p.resampling
    assert p.open.stream_position == "cp" and p.open.failed_turn == "turn"
    p.on_resample(12)
    assert p.on_round([OK], position=1, code="print(x)", feedback="1") is Action.PURIFY
    mode, similarity = p.choose_mode("print(x)", splittable=True)
    assert mode == "shallow" and similarity >= 0.5
    event = p.on_purified(mode, similarity, "print(x)", mentions_error=False)
    assert not p.resampling
    assert (event.retries, event.resampled_tokens, event.mode, event.failed_code) == (1, 12, "shallow", "print(y)")
    assert (stats.rollbacks_triggered, stats.rollbacks_recovered, stats.rollbacks_shallow, stats.rollbacks_deep) == (
        1,
        1,
        1,
        0,
    )
    assert (stats.tool_calls, stats.first_attempt_calls, stats.first_attempt_successes) == (2, 1, 0)
    assert stats.failures[ErrorCategory.EXCEPTION] == 1


def test_dissimilar_or_unsplittable_replacements_are_deep():
    p, stats = policy()
    fail_round(p, code="import math\nprint(math.pi)")
    assert p.choose_mode("total = sum(range(10))\nprint(total)", splittable=True)[0] == "deep"
    assert p.choose_mode("import math\nprint(math.pi)", splittable=False)[0] == "deep"
    p.on_purified("deep", 0.1, "x", mentions_error=True)
    assert (stats.rollbacks_deep, stats.deep_mentions_error) == (1, 1)


def test_threshold_is_inclusive():
    p, _ = policy(rollback_similarity_threshold=1.0)
    fail_round(p, code="same")
    assert p.choose_mode("same", splittable=True)[0] == "shallow"


def test_k_retries_then_give_up_and_keep_going():
    p, stats = policy(max_tool_retries=2)
    assert fail_round(p) is Action.RETRY
    p.on_resample(5)
    assert fail_round(p, TIMEOUT) is Action.RETRY
    p.on_resample(6)
    assert fail_round(p) is Action.GIVE_UP and not p.resampling
    assert (stats.rollbacks_triggered, stats.rollbacks_failed, stats.retries_used, stats.resampled_tokens) == (
        1,
        1,
        2,
        11,
    )
    event = stats.rollback_events[0]
    assert (event.mode, event.retries, event.kept) == ("failed", 2, "last")
    assert p.closed.event is event
    # counted per occurrence, retries included
    assert stats.failures[ErrorCategory.EXCEPTION] == 2 and stats.failures[ErrorCategory.TIMEOUT] == 1
    # a later position gets its own budget
    assert fail_round(p) is Action.RETRY


@pytest.mark.parametrize(("keep", "purified"), [("last", 2), ("all", 0)])
def test_an_unrecovered_position_keeps_its_last_attempt_by_default(keep, purified):
    """`last` (the reference): the earlier failed attempts leave the trajectory, so their errors count as purified."""
    p, stats = policy(max_tool_retries=2, rollback_exhausted_keep=keep)
    p.on_round([NAME_ERROR], position=0, code="a", feedback="e0", stream_position="cp0", failed_turn="t0")
    p.on_resample(1)
    p.on_round([NAME_ERROR], position=0, code="b", feedback="e1", stream_position="cp1", failed_turn="t1")
    p.on_resample(1)
    assert p.on_round([TIMEOUT], position=0, code="c", feedback="e2", stream_position="cp2") is Action.GIVE_UP
    assert (p.closed.stream_position, p.closed.last_round) == ("cp0", "cp2")
    assert stats.purified_errors == purified and stats.rollback_events[0].kept == keep


def test_the_failed_n_times_note_comes_from_two_retries_on():
    p, _ = policy(max_tool_retries=1)
    fail_round(p)
    p.on_resample(1)
    assert fail_round(p) is Action.GIVE_UP and p.note() is None  # one retry: no note
    p, _ = policy(max_tool_retries=2)
    fail_round(p)
    p.on_resample(1)
    fail_round(p)
    p.on_resample(1)
    assert fail_round(p, TIMEOUT) is Action.GIVE_UP
    # the reference's wording; it names no error, so nothing of the attempts that leave the trajectory stays
    assert p.note() == (
        "\n\nNote: This approach has been attempted 3 times with the same type of error. "
        "Consider trying a different algorithm, method, or approach to solve this problem."
    )
    p, _ = policy(max_tool_retries=3)
    fail_round(p)
    p.on_resample(1)
    fail_round(p, TIMEOUT)
    p.on_resample(1)
    assert fail_round(p, NAME_ERROR) is Action.RETRY
    p.on_resample(1)
    assert p.on_round([INFRA], position=0, code="x", feedback="") is Action.GIVE_UP
    assert p.note() is None  # given up on an infrastructure error: the model is not told to change its method


def test_no_retry_when_it_could_not_be_executed():
    p, stats = policy(max_tool_retries=3)
    assert p.on_round([NAME_ERROR], position=0, code="a", feedback="e", can_retry=False) is Action.CONTINUE
    assert stats.rollbacks_triggered == 0  # like the baseline: the error stays and the model goes on
    assert fail_round(p) is Action.RETRY
    p.on_resample(1)
    assert p.on_round([NAME_ERROR], position=0, code="b", feedback="e", can_retry=False) is Action.GIVE_UP
    assert stats.rollbacks_failed == 1 and stats.retries_used == 1


def test_infra_errors_are_never_rolled_back():
    p, stats = policy()
    assert p.on_round([INFRA], position=0, code="x", feedback="unavailable") is Action.CONTINUE
    assert p.on_round([NAME_ERROR, INFRA], position=1, code="x", feedback="") is Action.CONTINUE
    assert stats.infra_errors == 2 and stats.rollbacks_triggered == 0
    fail_round(p)
    p.on_resample(3)
    assert p.on_round([INFRA], position=2, code="x", feedback="", stream_position="cp-infra") is Action.GIVE_UP
    assert p.closed.last_round == "cp-infra"  # with `last`, the infra attempt is what stays
    assert stats.rollbacks_failed == 1 and stats.to_extra_fields()["saar_infra_error"] is True


def test_only_configured_categories_trigger():
    p, stats = policy(rollback_on_errors=(ErrorCategory.SYNTAX_ERROR,))
    assert fail_round(p) is Action.CONTINUE
    assert fail_round(p, ToolOutcome.model_error(ErrorCategory.SYNTAX_ERROR, "SyntaxError")) is Action.RETRY


def test_parallel_round_with_one_failure_retries_the_turn_and_needs_all_to_succeed():
    p, stats = policy()
    assert p.on_round([OK, NAME_ERROR], position=0, code="a\nb", feedback="") is Action.RETRY
    assert (stats.first_attempt_calls, stats.first_attempt_successes) == (2, 1)
    p.on_resample(4)
    assert p.on_round([OK, NAME_ERROR], position=0, code="a\nb", feedback="") is Action.RETRY
    p.on_resample(4)
    assert p.on_round([OK, OK], position=0, code="a\nc", feedback="") is Action.PURIFY


def test_purified_errors_count_the_failed_calls_a_recovery_removed_not_the_retries():
    """An empty resample costs a retry but is no tool error; a parallel round's failures all count."""
    p, stats = policy(max_tool_retries=3)
    assert p.on_round([OK, NAME_ERROR], position=0, code="a\nb", feedback="") is Action.RETRY
    p.on_resample(0)
    assert p.on_unusable_resample("empty") is Action.RETRY
    p.on_resample(5)
    assert p.on_round([NAME_ERROR, TIMEOUT], position=0, code="a\nc", feedback="") is Action.RETRY
    p.on_resample(5)
    assert p.on_round([OK, OK], position=0, code="a\nd", feedback="") is Action.PURIFY
    event = p.on_purified("deep", 0.0, "a\nd", mentions_error=False)
    assert (event.retries, event.model_errors, stats.purified_errors) == (3, 3, 3)
    assert sum(stats.failures.values()) == 3  # all three sampled errors are gone from the final trajectory
    fail_round(p)
    p.on_resample(2)
    fail_round(p)
    p.on_resample(2)
    fail_round(p)
    p.on_resample(2)
    fail_round(p)  # budget spent: the position fails; only its last attempt's error stays (`last`)
    assert stats.purified_errors == 3 + 3 and stats.rollbacks_failed == 1


def test_unusable_resamples():
    p, stats = policy(max_tool_retries=2)
    fail_round(p)
    p.on_resample(0)
    assert p.on_unusable_resample("empty") is Action.RETRY  # budget left: generate again
    p.on_resample(0)
    assert p.on_unusable_resample("empty") is Action.GIVE_UP
    fail_round(p)
    p.on_resample(3)
    assert p.on_unusable_resample("no_call") is Action.GIVE_UP
    assert stats.rollbacks_failed == 2 and not p.resampling and p.note() is None


def test_inactive_or_zero_budget_never_retries_but_counts():
    for p, stats in (policy(active=False), policy(max_tool_retries=0)):
        assert fail_round(p) is Action.CONTINUE
        assert stats.tool_calls == 1 and stats.rollbacks_triggered == 0
    assert policy(active=False)[1].rollback_enabled == 0 and policy()[1].rollback_enabled == 1


def test_gate_is_reproducible_and_honours_the_probability():
    draws = [draw_gate(3, f"sample={i}", 0.3) for i in range(4000)]
    assert draws == [draw_gate(3, f"sample={i}", 0.3) for i in range(4000)]
    assert 0.27 < sum(draws) / len(draws) < 0.33
    assert draws != [draw_gate(4, f"sample={i}", 0.3) for i in range(4000)]
    assert all(draw_gate(0, str(i), 1.0) for i in range(100)) and not any(draw_gate(0, str(i), 0.0) for i in range(100))


def test_on_resample_requires_an_open_position():
    p, _ = policy()
    with pytest.raises(AssertionError):
        p.on_resample(1)


def test_a_position_closed_before_any_retry_is_neither_triggered_nor_failed():
    """E.g. the failed call's own tool response filled response_length: the position opened, no retry ran."""
    p, stats = policy()
    assert fail_round(p) is Action.RETRY
    assert stats.rollbacks_triggered == 0  # triggered = got at least one retry; none was generated yet
    assert p.close_open("the response is full") is Action.GIVE_UP
    assert (stats.rollbacks_triggered, stats.rollbacks_failed, stats.purified_errors) == (0, 0, 0)
    assert stats.rollback_events == [] and p.note() is None
    fail_round(p)
    p.on_resample(4)
    assert stats.rollbacks_triggered == 1


def test_rollback_after_errors_tolerates_the_first_failures_in_a_row():
    p, stats = policy(rollback_after_errors=2)
    assert fail_round(p, code="first") is Action.CONTINUE  # kept, as in the baseline
    assert fail_round(p, code="second") is Action.RETRY  # the second failure in a row opens the position
    assert p.open.event.failed_code == "second"
    p.on_resample(3)
    assert p.on_round([OK], position=2, code="fix", feedback="") is Action.PURIFY
    p.on_purified("deep", 0.0, "fix", mentions_error=False)
    # a success resets the count: the next failure is tolerated again
    assert fail_round(p) is Action.CONTINUE
    assert p.on_round([OK], position=3, code="ok", feedback="") is Action.CONTINUE
    assert fail_round(p) is Action.CONTINUE
    assert (stats.rollbacks_triggered, stats.rollbacks_recovered) == (1, 1)
    # the count restarts after every round without an eligible failure; each tolerated failure is counted
    assert stats.tolerated_errors == 3


def test_an_appended_recovery_is_recovered_but_not_spliced():
    p, stats = policy(rollback_is_threshold=0.5)
    fail_round(p)
    p.on_resample(4)
    assert p.on_round([OK], position=1, code="print(x)", feedback="") is Action.PURIFY
    event = p.on_appended("shallow", 0.8, "print(x)", IsScore((-1.0, -0.5, -0.5, -1.0)))
    assert (event.is_decision, event.log_is_ratio, event.is_tokens, event.mode) == ("append", -3.0, 4, "shallow")
    assert (stats.rollbacks_recovered, stats.rollbacks_shallow, stats.rollbacks_deep) == (1, 0, 0)
    assert (stats.planb_appends, stats.planb_replaces, stats.is_scored, stats.purified_errors) == (1, 0, 1, 0)
    fail_round(p)
    p.on_resample(4)
    p.on_round([OK], position=2, code="print(x)", feedback="")
    event = p.on_purified("deep", 0.1, "print(x)", False, IsScore((0.1, 0.1) + (0.0,) * 7), "replace")
    assert (event.is_decision, event.log_is_ratio, event.is_tokens) == ("replace", pytest.approx(0.2), 9)
    assert (stats.planb_appends, stats.planb_replaces, stats.is_scored, stats.rollbacks_deep) == (1, 1, 2, 1)
    assert stats.rollbacks_recovered == stats.rollbacks_shallow + stats.rollbacks_deep + stats.planb_appends


@pytest.mark.parametrize(
    ("score", "decision", "kept", "purified"),
    [(IsScore((-2.0, -1.0)), "append", "all", 0), (IsScore((0.0, 0.1)), "replace", "last", 2)],
)
def test_the_gate_on_an_exhausted_positions_kept_attempt_keeps_every_attempt_below_the_threshold(
    score, decision, kept, purified
):
    p, stats = policy(max_tool_retries=2, rollback_is_threshold=0.5)
    for retry in range(3):
        if retry:
            p.on_resample(1)
        p.on_round([NAME_ERROR], position=0, code=f"c{retry}", feedback="e", stream_position=f"cp{retry}")
    assert p.is_decision(score) == decision
    p.on_exhausted_scored(score, decision)
    [event] = stats.rollback_events
    assert (event.kept, event.is_decision, event.is_statistic, stats.purified_errors) == (
        kept,
        decision,
        "sequence",
        purified,
    )
    assert (event.log_is_ratio, event.is_token_log_ratios, stats.is_scored) == (
        score.log_ratio,
        list(score.token_log_ratios),
        1,
    )
    assert (stats.planb_exhausted_appends, stats.planb_exhausted_replaces) == (int(kept == "all"), int(kept == "last"))


@pytest.mark.parametrize(("gate", "decision"), [({"rollback_is_threshold": 0.5}, "append"), ({}, None)])
def test_an_unscored_position_is_counted_never_an_infrastructure_error_and_gets_the_gates_fallback(gate, decision):
    """The gate appends what it cannot score (the reference replaces); measuring only, nothing is decided."""
    p, stats = policy(rollback_is_measure=not gate, **gate)
    assert p.unscored_decision(ScoringFailure("aborted", "3 scoring requests failed")) == decision
    assert (stats.infra_errors, stats.failures[ErrorCategory.SCORING_FAILED]) == (0, 1)
