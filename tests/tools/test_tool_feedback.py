"""Verdict → outcome → text mapping, on verdicts shaped like the judge's JSON."""

from __future__ import annotations

import pytest

from cleaner.saar.outcome import ErrorCategory, OutcomeKind
from cleaner.tools.feedback import cap, classify, error_summary, render
from cleaner.tools.judge_client import JudgeVerdict


def verdict(**fields) -> JudgeVerdict:
    base = dict(success=False, run_success=False, reason="", cost=0.01, stdout="", stderr="Traceback ...", exit_code=1)
    base.update(fields)
    return JudgeVerdict(**base)


@pytest.mark.parametrize(
    ("fields", "category"),
    [
        (dict(success=True, run_success=True, exit_code=0, stderr=""), None),
        (dict(reason="worker_timeout", limit="wall_time", exit_code=None, signal=9), ErrorCategory.TIMEOUT),
        (dict(limit="cpu_time", exit_code=None, signal=24), ErrorCategory.TIMEOUT),
        (dict(exception_type="MemoryError", limit="memory"), ErrorCategory.MEMORY_LIMIT),
        (dict(exception_type="IndentationError", exception_line=2), ErrorCategory.SYNTAX_ERROR),
        (dict(exception_type="ZeroDivisionError", exception_line=1), ErrorCategory.EXCEPTION),
        (dict(exit_code=3), ErrorCategory.NONZERO_EXIT),
        (dict(exit_code=None, signal=11), ErrorCategory.NONZERO_EXIT),
    ],
)
def test_classification(fields, category):
    outcome = classify(verdict(**fields))
    assert outcome.category is category
    assert outcome.kind is (OutcomeKind.OK if category is None else OutcomeKind.MODEL_ERROR)


def test_exception_text_uses_the_models_line_and_source():
    v = verdict(
        stdout="ok\n", exception_type="ZeroDivisionError", exception_line=3, exception_message="division by zero"
    )
    text = render(v, classify(v), "a = 0\nprint('ok')\n1 / a\n", line_offset=1, max_output_chars=100)
    assert text == (
        "Tool call failure\nreason: \nstdout: ok\n\n"
        "stderr: ZeroDivisionError at line 2: division by zero\n    print('ok')"
    )


def test_error_raised_while_replaying_or_outside_the_cell():
    v = verdict(exception_type="KeyError", exception_line=1, exception_message="'k'")
    assert error_summary(v, "x", line_offset=1) == "KeyError while re-running an earlier cell: 'k'"
    assert error_summary(verdict(exception_type="ValueError", exception_line=9, exception_message="m"), "x", 0) == (
        "ValueError: m"
    )


def test_timeout_text_keeps_partial_output():
    v = verdict(stdout="step 1\n", stderr="", reason="worker_timeout", limit="wall_time", exit_code=None, signal=9)
    assert render(v, classify(v), "", 0, 100) == (
        "Tool call failure\nreason: worker_timeout\nstdout: step 1\n\n"
        "stderr: TimeoutError: the code exceeded the time limit"
    )


def test_streams_are_capped_in_the_middle_and_executor_cuts_are_flagged():
    v = verdict(success=True, run_success=True, exit_code=0, stdout="a" * 50 + "b" * 50, stderr="", truncated=True)
    text = render(v, classify(v), "", 0, max_output_chars=40)
    stdout = text.split("\n")[1]
    assert stdout == "stdout: " + "a" * 12 + "...(truncated)..." + "b" * 11
    assert "(output truncated by the executor)" in text
    assert len(cap("x" * 1000, 64)) == 64
