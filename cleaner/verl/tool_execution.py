"""Running one tool call for the cleaner agent loop, and the `ToolOutcome` of every call.

Two paths, chosen per trajectory by the agent loop:
- SAAR active: `execute_call` runs the call itself. Whatever goes wrong (unknown tool, arguments that are not a JSON
  object, a tool that raises, answers with media or reports a malformed outcome) becomes an outcome: a `bad_call`
  model error or a `tool_error` infrastructure error, never an exception that would end the trajectory.
- SAAR inactive: verl's own `ToolAgentLoop._call_tool` runs, unchanged, so the tool texts are the stock ones.
  `stock_outcome` then classifies the call for the statistics; to know whether the tool raised (verl turns that
  into text), the loop runs on `observed_tools`, copies of the tools whose methods record an exception in a context
  variable before re-raising it.

Stateful tools keep a trajectory's history in the list `agent_data.<TOOL_HISTORY_ATTR>`; the loop cuts it together
with the conversation, so entries from discarded attempts never outlive a rollback.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.function_tool import FunctionTool, normalize_function_tool_return
from verl.tools.schemas import ToolResponse

from cleaner.saar.outcome import TOOL_OUTCOME_KEY, ErrorCategory, ToolOutcome

logger = logging.getLogger(__name__)

# Shown to the model when a tool object itself fails: the model did nothing wrong.
TOOL_CRASH_TEXT = "Error: the tool is temporarily unavailable."
TOOL_HISTORY_ATTR = "cleaner_tool_history"

_crashes: ContextVar[list[BaseException] | None] = ContextVar("cleaner_tool_crashes", default=None)
T = TypeVar("T")


@dataclass(frozen=True)
class CallResult:
    response: ToolResponse
    reward: float | None
    metrics: dict[str, Any]
    outcome: ToolOutcome


def tool_history(agent_data: Any) -> list[str]:
    """The trajectory's stateful-tool history (created empty on first use)."""
    history = getattr(agent_data, TOOL_HISTORY_ATTR, None)
    if history is None:
        history = []
        setattr(agent_data, TOOL_HISTORY_ATTR, history)
    return history


def _bad_call(text: str) -> CallResult:
    return CallResult(ToolResponse(text=text), 0.0, {}, ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail=text))


def _tool_error(name: str, detail: str) -> CallResult:
    outcome = ToolOutcome.infra_error(ErrorCategory.TOOL_ERROR, detail=f"tool {name!r}: {detail}")
    return CallResult(ToolResponse(text=TOOL_CRASH_TEXT), 0.0, {}, outcome)


def _argument_problem(tool_call: FunctionCall, active_tools: dict[str, Any]) -> str | None:
    """Why a call cannot run, in words the model can act on; None when it names a tool with a JSON object."""
    name = tool_call.name
    if not name:
        return f"Error: the tool call could not be parsed: {tool_call.arguments[:200]!r} is not a valid call."
    if name not in active_tools:
        return f"Error: unknown tool {name!r}. Available tools: {sorted(active_tools)}."
    try:
        arguments = json.loads(tool_call.arguments)
    except (json.JSONDecodeError, TypeError) as exc:
        return f"Error: the arguments of {name!r} are not valid JSON ({exc})."
    if not isinstance(arguments, dict):
        return f"Error: the arguments of {name!r} must be a JSON object, got {type(arguments).__name__}."
    return None


async def execute_call(
    tool_call: FunctionCall, active_tools: dict[str, Any], tools_kwargs: dict[str, Any], agent_data: Any
) -> CallResult:
    """Run one call (SAAR path); every failure is an outcome, never an exception."""
    problem = _argument_problem(tool_call, active_tools)
    if problem is not None:
        return _bad_call(problem)
    name, arguments = tool_call.name, json.loads(tool_call.arguments)
    tool, instance_id = active_tools[name], None
    try:
        if isinstance(tool, FunctionTool):
            response, reward, metrics = normalize_function_tool_return(await tool.call(arguments))
        else:
            create_kwargs = tools_kwargs.get(name, {}).get("create_kwargs", {})
            instance_id, _ = await tool.create(create_kwargs=create_kwargs)
            response, reward, metrics = await tool.execute(instance_id, arguments, agent_data=agent_data)
        metrics = dict(metrics or {})
        raw_outcome = metrics.get(TOOL_OUTCOME_KEY)
        # A tool that reports no outcome is taken as succeeded ("ok, unclassified"): it is never rolled back.
        outcome = ToolOutcome.ok() if raw_outcome is None else ToolOutcome.from_dict(raw_outcome)
    except Exception as exc:
        # A tool that raises (or reports a malformed outcome) is broken, not the model: never rolled back.
        logger.exception("tool %r failed", name)
        return _tool_error(name, f"raised {exc!r}")
    finally:
        if instance_id is not None:
            await tool.release(instance_id)
    if response.image or response.video:
        # Media cannot be spliced: the trajectory gets an infrastructure error instead of failing mid-run.
        logger.error("tool %r returned media, which the SAAR loop does not support", name)
        return _tool_error(name, "returned image/video content; the SAAR loop supports text tool responses only")
    return CallResult(response, reward, metrics, outcome)


def stock_outcome(
    tool_call: FunctionCall, active_tools: dict[str, Any], metrics: dict[str, Any] | None, crashed: bool
) -> ToolOutcome:
    """The outcome of a call that verl's own `_call_tool` ran (SAAR inactive), for the statistics only."""
    problem = _argument_problem(tool_call, active_tools)
    if problem is not None:
        return ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail=problem)
    if crashed:
        return ToolOutcome.infra_error(ErrorCategory.TOOL_ERROR, detail=f"tool {tool_call.name!r} raised")
    raw_outcome = (metrics or {}).get(TOOL_OUTCOME_KEY)
    if raw_outcome is None:
        return ToolOutcome.ok()
    try:
        return ToolOutcome.from_dict(raw_outcome)
    except ValueError as exc:
        return ToolOutcome.infra_error(ErrorCategory.TOOL_ERROR, detail=str(exc))


def observed_tools(tools: dict[str, Any]) -> dict[str, Any]:
    """Copies of `tools` (same class, same state) whose entry points record an exception before re-raising it."""
    observed = {}
    for name, tool in tools.items():
        proxy = copy.copy(tool)
        for method in ("call",) if isinstance(tool, FunctionTool) else ("create", "execute"):
            # Bound to the original tool: the copy is only a dispatch surface.
            setattr(proxy, method, _recording_crashes(getattr(tool, method)))
        observed[name] = proxy
    return observed


def _recording_crashes(method):
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any):
        try:
            return await method(*args, **kwargs)
        except Exception as exc:
            crashes = _crashes.get()
            if crashes is not None:
                crashes.append(exc)
            raise

    return wrapper


async def observe_crashes(call: Awaitable[T]) -> tuple[T, bool]:
    """Await `call` (in the current task) and report whether an observed tool raised during it."""
    crashes: list[BaseException] = []
    token = _crashes.set(crashes)
    try:
        result = await call
    finally:
        _crashes.reset(token)
    return result, bool(crashes)


def truncate_text(text: str, limit: int, side: str) -> str:
    """verl's `max_tool_response_length` cut (characters; left, right or middle)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]
