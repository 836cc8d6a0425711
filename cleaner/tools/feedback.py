"""What a judge verdict means (a `ToolOutcome`) and what the model reads about it (reference-format text).

Both are built from the judge's structured fields; no text of the program's output is ever pattern-matched.
The text keeps the format CLEANER/DemyAgent checkpoints were trained on: a first line "Tool call success" or
"Tool call failure", then `reason:` (failures only), `stdout:` and `stderr:`. Errors read
"<ErrType> at line N: <message>" with the model's own line numbers, followed by that source line.
"""

from __future__ import annotations

from cleaner.saar.outcome import ErrorCategory, ToolOutcome
from cleaner.tools.judge_client import JudgeVerdict

SUCCESS_HEADER = "Tool call success"
FAILURE_HEADER = "Tool call failure"
# Same marker as verl's middle truncation of tool responses, so a capped stream reads like a capped response.
TRUNCATION_MARKER = "...(truncated)..."
EXECUTOR_TRUNCATION_NOTE = "...(output truncated by the executor)"
INFRA_TEXT = (
    f"{FAILURE_HEADER}\nreason: execution service unavailable\n"
    "The code was not run because the execution service did not answer. Nothing is known about the code itself."
)

_SYNTAX_ERRORS = {"SyntaxError", "IndentationError", "TabError"}
_TIME_LIMITS = {"wall_time", "cpu_time"}


def classify(verdict: JudgeVerdict) -> ToolOutcome:
    """OK, or the model error that explains why the program failed."""
    if verdict.run_success:
        return ToolOutcome.ok()
    detail = f"exit_code={verdict.exit_code} signal={verdict.signal} limit={verdict.limit} reason={verdict.reason!r}"
    if verdict.limit in _TIME_LIMITS or verdict.reason == "worker_timeout":
        return ToolOutcome.model_error(ErrorCategory.TIMEOUT, verdict.exception_type, detail)
    if verdict.limit == "memory" or verdict.exception_type == "MemoryError":
        return ToolOutcome.model_error(ErrorCategory.MEMORY_LIMIT, verdict.exception_type, detail)
    if verdict.exception_type in _SYNTAX_ERRORS:
        return ToolOutcome.model_error(ErrorCategory.SYNTAX_ERROR, verdict.exception_type, detail)
    if verdict.exception_type is not None:
        return ToolOutcome.model_error(ErrorCategory.EXCEPTION, verdict.exception_type, detail)
    return ToolOutcome.model_error(ErrorCategory.NONZERO_EXIT, None, detail)


def cap(text: str, max_chars: int) -> str:
    """Middle-truncate one output stream to `max_chars` characters (the marker included)."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - len(TRUNCATION_MARKER), 0)
    head = keep - keep // 2
    return text[:head] + TRUNCATION_MARKER + (text[-(keep // 2) :] if keep // 2 else "")


def error_summary(verdict: JudgeVerdict, code: str, line_offset: int) -> str:
    """'<ErrType> at line N: <msg>' plus the offending source line, in the model's coordinates."""
    message = verdict.exception_message or ""
    lines = code.splitlines()
    line = None if verdict.exception_line is None else verdict.exception_line - line_offset
    if line is not None and line < 1:
        return f"{verdict.exception_type} while re-running an earlier cell: {message}"
    if line is None or line > len(lines):
        return f"{verdict.exception_type}: {message}"
    summary = f"{verdict.exception_type} at line {line}: {message}"
    source = lines[line - 1].strip()
    return f"{summary}\n    {source}" if source else summary


def _failure_stderr(verdict: JudgeVerdict, outcome: ToolOutcome, code: str, line_offset: int) -> str:
    if verdict.exception_type is not None:
        return error_summary(
            verdict, code, line_offset
        )  # replaces the sandbox traceback, whose paths are not the model's
    parts = [verdict.stderr.rstrip("\n")] if verdict.stderr.strip() else []
    if outcome.category is ErrorCategory.TIMEOUT:
        parts.append("TimeoutError: the code exceeded the time limit")
    elif outcome.category is ErrorCategory.MEMORY_LIMIT:
        parts.append("MemoryError: the code exceeded the memory limit")
    elif verdict.signal is not None:
        parts.append(f"The process was killed by signal {verdict.signal}")
    elif verdict.exit_code is not None:
        parts.append(f"The process exited with code {verdict.exit_code}")
    return "\n".join(parts)


def _failure_reason(outcome: ToolOutcome) -> str:
    # The reference's vocabulary: empty for ordinary errors, `worker_timeout` for timeouts.
    if outcome.category is ErrorCategory.TIMEOUT:
        return "worker_timeout"
    if outcome.category is ErrorCategory.MEMORY_LIMIT:
        return "memory_limit"
    return ""


def render(verdict: JudgeVerdict, outcome: ToolOutcome, code: str, line_offset: int, max_output_chars: int) -> str:
    """The tool response text for a verdict the judge produced (infra failures use INFRA_TEXT instead)."""
    stdout = cap(verdict.stdout, max_output_chars)
    if verdict.truncated:
        stdout = f"{stdout}\n{EXECUTOR_TRUNCATION_NOTE}"
    if outcome.is_ok:
        return f"{SUCCESS_HEADER}\nstdout: {stdout}\nstderr: {cap(verdict.stderr, max_output_chars)}"
    stderr = cap(_failure_stderr(verdict, outcome, code, line_offset), max_output_chars)
    return f"{FAILURE_HEADER}\nreason: {_failure_reason(outcome)}\nstdout: {stdout}\nstderr: {stderr}"


def bad_call_text(problem: str) -> str:
    return f"{FAILURE_HEADER}\nreason: tool_call_format_error\nstderr: {problem}"
