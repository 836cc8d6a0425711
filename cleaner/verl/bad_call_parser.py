"""`BadCallAwareParser`: a verl tool parser wrapper that accounts for every call span the inner parser drops.

verl's parsers log and skip a `<tool_call>` span they cannot parse (hermes: JSON that does not decode; qwen3_coder: a
function header without `>`), which would end the trajectory silently. The wrapper finds each dropped span by
parsing every complete span on its own with the inner parser, so it works whatever the call syntax is (JSON or XML).

A dropped span whose text holds an earlier start marker (the reasoning mentioned `<tool_call>`, so verl's regex
opened the span there) is parsed again from its last start marker: the call opens at the last start marker before
the end marker, as `cleaner.saar.boundary` defines it. Every other dropped span becomes a `FunctionCall` with an
empty name and the span's text as arguments, which the agent loop answers as a `bad_call` model error.

With `surface=False` (SAAR inactive for the trajectory) the inner parser's result is returned unchanged, so the
stock path stays byte-identical; the dropped spans are still listed in `dropped` for the statistics.
"""

from __future__ import annotations

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

from cleaner.saar.boundary import CallMarkers


class BadCallAwareParser(ToolParser):
    def __init__(self, inner: ToolParser, markers: CallMarkers, surface: bool):
        if markers.end is None:
            raise ValueError("BadCallAwareParser needs call markers with an end marker")
        super().__init__(inner.tokenizer)
        self.inner = inner
        self.markers = markers
        self.surface = surface
        start_ids = inner.tokenizer.encode(markers.start, add_special_tokens=False)
        self._start_id = start_ids[0] if len(start_ids) == 1 else None
        self.dropped: list[FunctionCall] = []  # what the inner parser dropped from the last turn parsed

    @property
    def stop_token_ids(self) -> list[int]:
        return self.inner.stop_token_ids

    async def extract_tool_calls(self, responses_ids, tools=None):
        content, calls = await self.inner.extract_tool_calls(responses_ids, tools)
        self.dropped = []
        # Cheap pre-check on token ids: a turn with no more start markers than parsed calls dropped nothing.
        if self._start_id is not None and list(responses_ids).count(self._start_id) <= len(calls):
            return content, calls
        self.dropped = await self._dropped_calls(self.tokenizer.decode(responses_ids), tools)
        return (content, calls + self.dropped) if self.surface else (content, calls)

    async def _dropped_calls(self, text: str, tools) -> list[FunctionCall]:
        start, end = self.markers.start, self.markers.end
        dropped, cursor = [], 0
        while True:
            opened = text.find(start, cursor)
            closed = text.find(end, opened + len(start)) if opened >= 0 else -1
            if closed < 0:
                return dropped
            span = text[opened : closed + len(end)]
            cursor = closed + len(end)
            if await self._parse(span, tools):
                continue
            last_start = span.rfind(start)
            recovered = await self._parse(span[last_start:], tools) if last_start > 0 else []
            inner_text = span[len(start) : -len(end)].strip()
            dropped.extend(recovered or [FunctionCall(name="", arguments=inner_text)])

    async def _parse(self, span: str, tools) -> list[FunctionCall]:
        _, calls = await self.inner.extract_tool_calls(self.tokenizer.encode(span, add_special_tokens=False), tools)
        return calls
