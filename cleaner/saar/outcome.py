"""The structured result of one tool call: the contract between tools and the SAAR agent loop.

A tool reports what happened as data, never as text to be pattern-matched: the loop rolls back
model errors only, and marks (never rolls back) infrastructure errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

# Key under which a verl BaseTool puts `ToolOutcome.to_dict()` in the metrics dict it returns
# from `execute()`: `return ToolResponse(text=...), reward, {TOOL_OUTCOME_KEY: outcome.to_dict()}`.
TOOL_OUTCOME_KEY = "tool_outcome"


class OutcomeKind(str, Enum):
    OK = "ok"
    MODEL_ERROR = "model_error"  # the model's code or call is at fault: a rollback candidate
    INFRA_ERROR = "infra_error"  # the execution service failed: never the model's fault


class ErrorCategory(str, Enum):
    # model errors
    EXCEPTION = "exception"  # uncaught exception at run time; `exception_type` names it
    SYNTAX_ERROR = "syntax_error"  # SyntaxError / IndentationError before anything ran
    TIMEOUT = "timeout"  # wall or CPU time limit
    MEMORY_LIMIT = "memory_limit"
    NONZERO_EXIT = "nonzero_exit"  # exit code != 0 or killed by a signal, without an exception
    BAD_CALL = "bad_call"  # unparsable arguments, unknown tool, missing/empty `code`
    # infrastructure errors
    JUDGE_UNREACHABLE = "judge_unreachable"  # connection refused/reset, DNS, HTTP 5xx after retries
    QUEUE_TIMEOUT = "queue_timeout"  # the judge could not schedule the run before the deadline
    JUDGE_INTERNAL_ERROR = "judge_internal_error"  # the judge answered `internal_error`/`invalid_input`
    WORKER_STARVED = "worker_starved"  # killed by the wall cap with CPU budget left: the judge was overloaded
    TOOL_ERROR = "tool_error"  # the tool object raised, or answered what the loop cannot use (media, bad outcome)
    AGENT_LOOP_ERROR = "agent_loop_error"  # the trajectory raised outside any tool; it was returned empty
    SCORING_FAILED = "scoring_failed"  # a prompt-log-prob prefill of SAAR's IS gate/measure kept failing (aborted)


MODEL_ERROR_CATEGORIES = (
    ErrorCategory.EXCEPTION,
    ErrorCategory.SYNTAX_ERROR,
    ErrorCategory.TIMEOUT,
    ErrorCategory.MEMORY_LIMIT,
    ErrorCategory.NONZERO_EXIT,
    ErrorCategory.BAD_CALL,
)
INFRA_ERROR_CATEGORIES = (
    ErrorCategory.JUDGE_UNREACHABLE,
    ErrorCategory.QUEUE_TIMEOUT,
    ErrorCategory.JUDGE_INTERNAL_ERROR,
    ErrorCategory.WORKER_STARVED,
    ErrorCategory.TOOL_ERROR,
    ErrorCategory.AGENT_LOOP_ERROR,
    ErrorCategory.SCORING_FAILED,
)

# Judge `reason` values that say the service, not the program, failed: never a model error, never rolled back.
JUDGE_INFRA_REASONS: dict[str, ErrorCategory] = {
    "queue_timeout": ErrorCategory.QUEUE_TIMEOUT,
    "internal_error": ErrorCategory.JUDGE_INTERNAL_ERROR,
    "invalid_input": ErrorCategory.JUDGE_INTERNAL_ERROR,
    "worker_starved": ErrorCategory.WORKER_STARVED,
}


@dataclass(frozen=True)
class ToolOutcome:
    kind: OutcomeKind
    category: ErrorCategory | None = None  # None exactly when kind is OK
    exception_type: str | None = None  # e.g. "NameError" for ErrorCategory.EXCEPTION / SYNTAX_ERROR
    detail: str = ""  # one line for logs and provenance, not shown to the model by the loop

    def __post_init__(self) -> None:
        if (self.kind is OutcomeKind.OK) != (self.category is None):
            raise ValueError(f"ToolOutcome: kind={self.kind.value} does not fit category={self.category}")
        if self.category is not None:
            expected = OutcomeKind.MODEL_ERROR if self.category in MODEL_ERROR_CATEGORIES else OutcomeKind.INFRA_ERROR
            if self.kind is not expected:
                raise ValueError(
                    f"ToolOutcome: category {self.category.value} is a {expected.value}, not {self.kind.value}"
                )

    @classmethod
    def ok(cls) -> ToolOutcome:
        return cls(OutcomeKind.OK)

    @classmethod
    def model_error(cls, category: ErrorCategory, exception_type: str | None = None, detail: str = "") -> ToolOutcome:
        return cls(OutcomeKind.MODEL_ERROR, category, exception_type, detail)

    @classmethod
    def infra_error(cls, category: ErrorCategory, detail: str = "") -> ToolOutcome:
        return cls(OutcomeKind.INFRA_ERROR, category, None, detail)

    @property
    def is_ok(self) -> bool:
        return self.kind is OutcomeKind.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "category": None if self.category is None else self.category.value,
            "exception_type": self.exception_type,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolOutcome:
        try:
            kind = OutcomeKind(data["kind"])
            category = None if data.get("category") is None else ErrorCategory(data["category"])
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a ToolOutcome dict: {data!r}") from exc
        return cls(kind, category, data.get("exception_type"), data.get("detail", ""))
