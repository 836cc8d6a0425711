"""Turn a sandbox `ExecutionResult` (or a service-side failure) into the code-judge response JSON.

Upstream fields keep upstream meaning: `run_success` = exited with status 0 within the limits; `success` =
`run_success` and, when `expected_output` is given, `stdout.strip() == expected_output.strip()`; `reason` is ""
for a normal pass or fail (exceptions included), `worker_timeout` when the wall or CPU limit fired,
`queue_timeout` when the API stopped waiting, `internal_error` when the service failed, `invalid_input` for an
unsupported `type`. One reason is our own: `worker_starved`, the wall-clock cap stopped a program that was
waiting for a CPU the loaded machine did not give it (an infrastructure outcome, not the program's fault).
Extra fields (ignored by old clients): `exception_type`, `exception_line`, `exception_message`, `exit_code`,
`signal`, `truncated`, `limit` (the sandbox limit that fired, or null) and `cpu_cost` (CPU seconds of the run).
A program stopped by a time limit gets upstream's timeout line as the last line of its stdout (TIMEOUT_LINE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from code_judge.execution import ExecutionResult, LimitHit

WORKER_TIMEOUT = "worker_timeout"
WORKER_STARVED = "worker_starved"
QUEUE_TIMEOUT = "queue_timeout"
INTERNAL_ERROR = "internal_error"
INVALID_INPUT = "invalid_input"

_TIME_LIMITS = (LimitHit.WALL_TIME, LimitHit.CPU_TIME)
# What upstream's in-program alarm prints before it kills the program; its clients (and its tests) match it.
TIMEOUT_LINE = "Suicide from timeout.\n"


@dataclass(frozen=True)
class JobSpec:
    """What the verdict depends on besides the run itself."""

    sub_id: str | None
    expected_output: str | None
    with_output: bool  # /run* endpoints return stdout/stderr, /judge* do not
    max_output_chars: int


def _cut(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def _with_timeout_line(stdout: str, limit: int) -> tuple[str, bool]:
    """The program's output, cut to leave room for it, ending with TIMEOUT_LINE on a line of its own."""
    kept, cut = _cut(stdout, max(0, limit - len(TIMEOUT_LINE) - 1))
    if kept and not kept.endswith("\n"):
        kept += "\n"
    return kept + TIMEOUT_LINE, cut


def execution_verdict(spec: JobSpec, result: ExecutionResult) -> dict[str, Any]:
    run_success = result.run_success
    success = run_success
    if success and spec.expected_output is not None:
        # Output past the sandbox's capture cap is unknown, so it cannot be declared equal.
        success = not result.stdout_truncated and result.stdout.strip() == spec.expected_output.strip()
    if result.limit_hit in _TIME_LIMITS:
        reason = WORKER_STARVED if result.starved else WORKER_TIMEOUT
        stdout, stdout_cut = _with_timeout_line(result.stdout, spec.max_output_chars)
    else:
        reason = ""
        stdout, stdout_cut = _cut(result.stdout, spec.max_output_chars)
    stderr, stderr_cut = _cut(result.stderr, spec.max_output_chars)
    return _verdict(
        spec,
        success=success,
        run_success=run_success,
        cost=result.cost_s,
        reason=reason,
        stdout=stdout,
        stderr=stderr,
        exception_type=result.exception_type,
        exception_line=result.exception_line,
        exception_message=result.exception_message,
        exit_code=result.exit_code,
        signal=result.signal,
        truncated=result.stdout_truncated or result.stderr_truncated or stdout_cut or stderr_cut,
        limit=None if result.limit_hit is None else result.limit_hit.value,
        cpu_cost=result.cpu_s,
    )


def service_verdict(spec: JobSpec, reason: str, message: str, cost_s: float) -> dict[str, Any]:
    """A verdict the service gives without a finished run; `message` says why (in stderr, for /run)."""
    no_run: dict[str, Any] = {**dict.fromkeys(_RUN_FIELDS), "truncated": False}
    return _verdict(
        spec, success=False, run_success=False, cost=cost_s, reason=reason, stdout="", stderr=message, **no_run
    )


# The extra fields, in the order they are answered; a verdict without a run answers null for each but `truncated`.
_RUN_FIELDS = ("exception_type", "exception_line", "exception_message", "exit_code", "signal", "truncated", "limit",
               "cpu_cost")  # fmt: skip


def _verdict(spec: JobSpec, *, stdout: str, stderr: str, **fields: Any) -> dict[str, Any]:
    """Upstream's fields in upstream's order, then stdout and stderr for /run*, then the extra fields."""
    upstream = ("success", "run_success", "cost", "reason")
    verdict: dict[str, Any] = {"sub_id": spec.sub_id, **{name: fields.pop(name) for name in upstream}}
    if spec.with_output:
        verdict.update(stdout=stdout, stderr=stderr)
    verdict.update(fields)
    return verdict
