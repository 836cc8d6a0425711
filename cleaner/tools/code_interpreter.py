"""`code_interpreter`: runs the model's Python on the code-judge service (the verl-free part of the tool).

It takes one required string argument, `code` (the schema DemyAgent/CLEANER checkpoints were trained on), and
answers with the reference-format text plus a `ToolOutcome`, which is what the SAAR loop decides on. verl cuts
the text to `max_tool_response_length`; this tool only caps each output stream at `max_output_chars` so a
runaway print cannot dwarf everything else. verl reaches it through `cleaner.verl.code_interpreter_tool`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, fields
from typing import Any

from cleaner.saar.outcome import ErrorCategory, ToolOutcome
from cleaner.tools.cell import auto_imports, build_program
from cleaner.tools.feedback import INFRA_TEXT, bad_call_text, classify, render
from cleaner.tools.judge_client import (
    JudgeClientConfig,
    JudgeSubmission,
    JudgeUnavailable,
    shared_judge_client,
    with_judge_url,
)

logger = logging.getLogger(__name__)

TOOL_NAME = "code_interpreter"
CODE_ARG = "code"


@dataclass(frozen=True)
class CodeInterpreterConfig:
    judge: JudgeClientConfig = field(default_factory=JudgeClientConfig)
    max_output_chars: int = 4096  # per stream, before verl's max_tool_response_length cut of the whole text
    stateful: bool = False  # replay this trajectory's earlier successful cells before each new one
    print_last_expression: bool = True  # notebook-style: show the value of a final bare expression
    auto_imports: str = "reference"  # names a cell gets without importing them (cleaner.tools.cell.AUTO_IMPORTS)

    def __post_init__(self) -> None:
        if self.max_output_chars < 32:
            raise ValueError(f"code_interpreter: max_output_chars must be >= 32, got {self.max_output_chars!r}")
        auto_imports(self.auto_imports)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodeInterpreterConfig:
        """Read the tool's yaml `config:` block. `type` belongs to verl; every other key must be known."""
        raw = with_judge_url(raw)  # the reference's host_addr/host_port
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


# The OpenAI function schema the tool brings (chat templates render it into the system prompt).
TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "A tool for executing code.",
        "parameters": {
            "type": "object",
            "properties": {CODE_ARG: {"type": "string", "description": "The code to execute."}},
            "required": [CODE_ARG],
        },
    },
}


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


class CodeInterpreter:
    """One call of the tool: check the arguments, run the cell on the judge, render what the model sees."""

    def __init__(self, settings: CodeInterpreterConfig):
        self.settings = settings

    async def run(self, parameters: Any, history: list[str] | None) -> tuple[str, ToolOutcome]:
        """The response text and outcome of one call.

        `history` (stateful mode) holds the trajectory's earlier successful cells: they run before this one, and
        this cell is appended to it when it succeeds. None runs the cell on its own.
        """
        problem = code_argument_problem(parameters)
        if problem is not None:
            return bad_call_text(problem), ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail=problem)
        code = parameters[CODE_ARG]
        imports = auto_imports(self.settings.auto_imports)
        program = build_program(code, history or (), echo=self.settings.print_last_expression, imports=imports)
        client = shared_judge_client(self.settings.judge)
        try:
            verdict = await client.run(JudgeSubmission(code=program.source))
        except JudgeUnavailable as exc:
            logger.warning("code_interpreter: %s", exc)
            return INFRA_TEXT, exc.outcome
        outcome = classify(verdict)
        if outcome.is_ok and history is not None:
            history.append(code)
        return render(verdict, outcome, code, program.line_offset, self.settings.max_output_chars), outcome
