"""verl tool parsers `cleaner_lenient` and `cleaner_lenient_json` (logic: `cleaner.tools.call_parsing`).

verl's `hermes` stays the default; select these with `actor_rollout_ref.rollout.multi_turn.format=cleaner_lenient`
(tags, json fences, bare JSON objects and python blocks) or `cleaner_lenient_json` (no python blocks). Each
parser also knows its call's token boundary (`find_call_start`), which the SAAR splice uses.
"""

from __future__ import annotations

from collections.abc import Sequence

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

from cleaner.tools.call_parsing import CallStartFinder, locate_calls, without_calls


@ToolParser.register("cleaner_lenient")
class LenientToolParser(ToolParser):
    python_blocks = True

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self._call_start = CallStartFinder(tokenizer, self.python_blocks)

    async def extract_tool_calls(self, responses_ids: list[int], tools=None) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(responses_ids)
        calls = locate_calls(text, self.python_blocks)
        function_calls = [FunctionCall(name=call.name, arguments=call.arguments) for call in calls]
        return without_calls(text, calls), function_calls

    def find_call_start(self, response_ids: Sequence[int]) -> int | None:
        """Index in `response_ids` of the token holding the first character of the first call, or None."""
        return self._call_start.find(response_ids)


@ToolParser.register("cleaner_lenient_json")
class LenientJsonToolParser(LenientToolParser):
    python_blocks = False
