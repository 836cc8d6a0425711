"""`code_interpreter`: the verl tool that runs the model's Python on the code-judge service.

It takes one required string argument, `code` (the schema DemyAgent/CLEANER checkpoints were trained on), and
returns the reference-format text plus `{TOOL_OUTCOME_KEY: ToolOutcome.to_dict()}` in its metrics, which is what
the SAAR loop decides on. verl cuts the text to `max_tool_response_length`; this tool only caps each output
stream at `max_output_chars` so a runaway print cannot dwarf everything else.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field, fields
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import (
    OpenAIFunctionParametersSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolSchema,
    ToolResponse,
)

import cleaner.tools.tool_parser  # noqa: F401  (registers `cleaner_lenient*` wherever this tool is loaded)
from cleaner.saar.outcome import TOOL_OUTCOME_KEY, ErrorCategory, ToolOutcome
from cleaner.tools.cell import build_program
from cleaner.tools.feedback import INFRA_TEXT, bad_call_text, classify, render
from cleaner.tools.judge_client import JudgeClientConfig, JudgeSubmission, JudgeUnavailable, shared_judge_client

logger = logging.getLogger(__name__)

TOOL_NAME = "code_interpreter"
CODE_ARG = "code"

@dataclass(frozen=True)
class CodeInterpreterConfig:
    judge: JudgeClientConfig = field(default_factory=JudgeClientConfig)
    max_output_chars: int = 4096  # per stream, before verl's max_tool_response_length cut of the whole text
    stateful: bool = False  # replay this trajectory's earlier successful cells before each new one
    print_last_expression: bool = True  # notebook-style: show the value of a final bare expression

    def __post_init__(self) -> None:
        if self.max_output_chars < 32:
            raise ValueError(f"code_interpreter: max_output_chars must be >= 32, got {self.max_output_chars!r}")

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodeInterpreterConfig:
        """Read the tool's yaml `config:` block. `type` belongs to verl; every other key must be known."""
        judge_fields = {("judge_url" if f.name == "url" else f.name): f for f in fields(JudgeClientConfig)}
        own_fields = {f.name: f for f in fields(cls) if f.name != "judge"}
        unknown = sorted(set(raw) - set(judge_fields) - set(own_fields) - {"type"})
        if unknown:
            raise ValueError(
                f"code_interpreter: unknown config key(s) {unknown}; allowed: {sorted(set(judge_fields) | set(own_fields))}"
            )
        for key, value in raw.items():
            spec = judge_fields.get(key) or own_fields.get(key)
            if spec is not None:
                _check_type(key, value, spec.type)
        judge = JudgeClientConfig(**{judge_fields[k].name: v for k, v in raw.items() if k in judge_fields})
        return cls(judge=judge, **{k: v for k, v in raw.items() if k in own_fields})


_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def _check_type(key: str, value: Any, annotation: str) -> None:
    accepted = _TYPES[annotation]
    if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
        raise ValueError(f"code_interpreter: {key} must be of type {annotation}, got {value!r}")


def default_tool_schema() -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema(
        type="function",
        function=OpenAIFunctionSchema(
            name=TOOL_NAME,
            description="A tool for executing code.",
            parameters=OpenAIFunctionParametersSchema(
                type="object",
                properties={CODE_ARG: OpenAIFunctionPropertySchema(type="string", description="The code to execute.")},
                required=[CODE_ARG],
            ),
        ),
    )


def code_argument_problem(parameters: Any) -> str | None:
    """Why the call's arguments are unusable, in words the model can act on; None when `code` is fine."""
    if not isinstance(parameters, dict):
        return f'{TOOL_NAME} expects a JSON object like {{"{CODE_ARG}": "print(1)"}}, got {type(parameters).__name__}'
    if CODE_ARG not in parameters:
        names = sorted(parameters) or "none"
        return f"{TOOL_NAME} needs the argument `{CODE_ARG}` (the Python source); got arguments: {names}"
    extra = sorted(set(parameters) - {CODE_ARG})
    if extra:
        return f"{TOOL_NAME} takes only the argument `{CODE_ARG}`; remove: {extra}"
    code = parameters[CODE_ARG]
    if not isinstance(code, str):
        return f"`{CODE_ARG}` must be a string of Python source, got {type(code).__name__}"
    if not code.strip():
        return f"`{CODE_ARG}` is empty: write the Python code to run"
    return None


class CodeInterpreterTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.settings = CodeInterpreterConfig.from_dict(config)
        schema = tool_schema or default_tool_schema()
        if CODE_ARG not in schema.function.parameters.properties:
            raise ValueError(f"code_interpreter: the tool schema must declare the `{CODE_ARG}` parameter")
        super().__init__(config, schema)
        # Stateful mode: a trajectory's successful cells. verl creates and releases a tool instance around EVERY
        # call, so the trajectory (its AgentData, held weakly) is the key; plain callers fall back to instance ids.
        self._cells_by_trajectory: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()
        self._cells_by_instance: dict[str, list[str]] = {}

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        problem = code_argument_problem(parameters)
        if problem is not None:
            outcome = ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail=problem)
            return ToolResponse(text=bad_call_text(problem)), 0.0, {TOOL_OUTCOME_KEY: outcome.to_dict()}
        code = parameters[CODE_ARG]
        history = self._history(instance_id, kwargs.get("agent_data")) if self.settings.stateful else None
        program = build_program(code, history or (), echo=self.settings.print_last_expression)
        client = shared_judge_client(self.settings.judge)
        try:
            verdict = await client.run(JudgeSubmission(code=program.source))
        except JudgeUnavailable as exc:
            logger.warning("code_interpreter: %s", exc)
            return ToolResponse(text=INFRA_TEXT), 0.0, {TOOL_OUTCOME_KEY: exc.outcome.to_dict()}
        outcome = classify(verdict)
        if outcome.is_ok and history is not None:
            history.append(code)
        text = render(verdict, outcome, code, program.line_offset, self.settings.max_output_chars)
        return ToolResponse(text=text), 0.0, {TOOL_OUTCOME_KEY: outcome.to_dict()}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._cells_by_instance.pop(instance_id, None)

    def _history(self, instance_id: str, agent_data: Any) -> list[str]:
        if agent_data is not None:
            return self._cells_by_trajectory.setdefault(agent_data, [])
        return self._cells_by_instance.setdefault(instance_id, [])
