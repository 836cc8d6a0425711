"""The verl `BaseTool` face of `code_interpreter` (the logic is `cleaner.tools.code_interpreter`).

Name it in the tool yaml as `cleaner.verl.code_interpreter_tool.CodeInterpreterTool`. Its metrics carry
`{TOOL_OUTCOME_KEY: ToolOutcome.to_dict()}`, which is what the SAAR loop decides on.
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

import cleaner.verl.tool_parser  # noqa: F401  (registers `cleaner_lenient*` wherever this tool is loaded)
from cleaner.saar.outcome import TOOL_OUTCOME_KEY
from cleaner.tools.code_interpreter import CODE_ARG, TOOL_SCHEMA, CodeInterpreter, CodeInterpreterConfig
from cleaner.verl.tool_execution import tool_history


def default_tool_schema() -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate(TOOL_SCHEMA)


class CodeInterpreterTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.settings = CodeInterpreterConfig.from_dict(config)
        schema = tool_schema or default_tool_schema()
        if CODE_ARG not in schema.function.parameters.properties:
            raise ValueError(f"code_interpreter: the tool schema must declare the `{CODE_ARG}` parameter")
        super().__init__(config, schema)
        self.interpreter = CodeInterpreter(self.settings)
        # Stateful mode: a trajectory's successful cells. verl creates and releases a tool instance around EVERY
        # call, so they live on the trajectory's AgentData (where the SAAR loop cuts them back on a rollback);
        # plain callers without one fall back to instance ids.
        self._cells_by_instance: dict[str, list[str]] = {}

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        history = self._history(instance_id, kwargs.get("agent_data")) if self.settings.stateful else None
        text, outcome = await self.interpreter.run(parameters, history)
        return ToolResponse(text=text), 0.0, {TOOL_OUTCOME_KEY: outcome.to_dict()}

    async def release(self, instance_id: str, **kwargs) -> None:
        self._cells_by_instance.pop(instance_id, None)

    def _history(self, instance_id: str, agent_data: Any) -> list[str]:
        if agent_data is not None:
            return tool_history(agent_data)
        return self._cells_by_instance.setdefault(instance_id, [])
