from __future__ import annotations

from code_judge.execution import ExecutionResult, LimitHit
from code_judge.verdict import JobSpec, execution_verdict, service_verdict


def result(**changes) -> ExecutionResult:
    values = dict(
        exit_code=0,
        signal=None,
        stdout="42\n",
        stderr="",
        stdout_truncated=False,
        stderr_truncated=False,
        cost_s=0.01,
        limit_hit=None,
        exception_type=None,
    )
    values.update(changes)
    return ExecutionResult(**values)


def spec(expected=None, with_output=True, max_chars=1000) -> JobSpec:
    return JobSpec(sub_id="s1", expected_output=expected, with_output=with_output, max_output_chars=max_chars)


def test_expected_output_compared_after_stripping_outer_whitespace_only():
    assert execution_verdict(spec(expected="  42"), result())["success"] is True
    assert execution_verdict(spec(expected="4 2"), result())["success"] is False
    assert execution_verdict(spec(expected="42.0"), result())["success"] is False


def test_without_expected_output_success_is_run_success():
    verdict = execution_verdict(spec(), result(exit_code=3))
    assert verdict["success"] is verdict["run_success"] is False
    assert verdict["exit_code"] == 3 and verdict["reason"] == ""


def test_time_limits_give_worker_timeout_and_name_the_limit():
    for limit in (LimitHit.WALL_TIME, LimitHit.CPU_TIME):
        verdict = execution_verdict(spec(), result(exit_code=None, signal=9, limit_hit=limit, cost_s=3.0))
        assert verdict["reason"] == "worker_timeout"
        assert verdict["run_success"] is False
        assert verdict["limit"] == limit.value and verdict["signal"] == 9


def test_a_run_stopped_at_a_time_limit_ends_its_stdout_with_upstreams_timeout_line():
    stopped = dict(exit_code=None, signal=9, cost_s=3.0)
    for limit, starved in ((LimitHit.WALL_TIME, False), (LimitHit.CPU_TIME, False), (LimitHit.WALL_TIME, True)):
        verdict = execution_verdict(spec(), result(**stopped, limit_hit=limit, starved=starved, stdout="partial"))
        assert verdict["stdout"] == "partial\nSuicide from timeout.\n" and verdict["truncated"] is False
    long_output = execution_verdict(
        spec(max_chars=30), result(**stopped, limit_hit=LimitHit.WALL_TIME, stdout="x" * 50)
    )
    assert long_output["stdout"] == "x" * 7 + "\nSuicide from timeout.\n" and long_output["truncated"] is True
    assert len(long_output["stdout"]) == 30
    assert "stdout" not in execution_verdict(spec(with_output=False), result(**stopped, limit_hit=LimitHit.WALL_TIME))
    assert execution_verdict(spec(), result(exit_code=1, limit_hit=LimitHit.MEMORY))["stdout"] == "42\n"


def test_a_starved_run_answers_worker_starved_with_the_cpu_it_used():
    starved = result(exit_code=None, signal=9, limit_hit=LimitHit.WALL_TIME, cost_s=10.0, cpu_s=0.05, starved=True)
    verdict = execution_verdict(spec(), starved)
    assert verdict["reason"] == "worker_starved" and verdict["limit"] == "wall_time"
    assert verdict["cpu_cost"] == 0.05 and verdict["run_success"] is False
    assert execution_verdict(spec(), result(cpu_s=0.002))["cpu_cost"] == 0.002


def test_memory_limit_is_a_plain_failure_not_a_timeout():
    verdict = execution_verdict(spec(), result(exit_code=1, limit_hit=LimitHit.MEMORY, exception_type="MemoryError"))
    assert verdict["reason"] == "" and verdict["limit"] == "memory" and verdict["exception_type"] == "MemoryError"


def test_output_is_cut_to_the_configured_length_and_flagged():
    verdict = execution_verdict(spec(max_chars=5), result(stdout="x" * 20, stderr="e" * 3))
    assert verdict["stdout"] == "xxxxx" and verdict["stderr"] == "eee" and verdict["truncated"] is True


def test_output_lost_at_the_capture_cap_never_matches_expected_output():
    verdict = execution_verdict(spec(expected="42"), result(stdout_truncated=True, limit_hit=LimitHit.OUTPUT))
    assert verdict["success"] is False and verdict["run_success"] is True and verdict["limit"] == "output"


def test_judge_verdicts_carry_no_output():
    verdict = execution_verdict(spec(with_output=False), result())
    assert "stdout" not in verdict and "stderr" not in verdict
    assert list(verdict)[:5] == ["sub_id", "success", "run_success", "cost", "reason"]


def test_service_verdict_explains_itself_in_stderr():
    verdict = service_verdict(spec(), "queue_timeout", "no verdict within 2 s", 2.0)
    assert verdict["reason"] == "queue_timeout" and verdict["stderr"] == "no verdict within 2 s"
    assert verdict["success"] is verdict["run_success"] is False and verdict["cost"] == 2.0
    assert verdict["exit_code"] is None and verdict["limit"] is None and verdict["truncated"] is False
    for with_output in (True, False):  # the same fields in the same order as a verdict of a run
        assert list(service_verdict(spec(with_output=with_output), "internal_error", "", 0)) == list(
            execution_verdict(spec(with_output=with_output), result())
        )
