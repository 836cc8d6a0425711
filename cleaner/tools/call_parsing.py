"""Lenient tool-call parsing for small models that do not emit `<tool_call>` tags, plus the call's token boundary.

Small Qwen2.5 models asked to call a tool write a ```` ```json ```` fence, a bare JSON object, or just a
```` ```python ```` block (see docs/tool.md). The verl parsers `cleaner_lenient` (all four forms) and
`cleaner_lenient_json` (no python blocks: for code tasks, whose final answer is itself a python block) in
`cleaner.verl.tool_parser` are thin wrappers around this module.

Forms are tried in this order, and the first that yields a call wins:
1. `<tool_call>{json}</tool_call>` (the executed call opens at the last tag before its closing tag);
2. ```` ```json {json} ``` ```` fences;
3. a bare `{"name": ..., "arguments": ...}` object;
4. ```` ```python ... ``` ```` blocks, run as `code_interpreter(code=...)`; an unclosed final block counts (a stop
   string may have eaten the closing fence).
Only text after the last `</think>` is searched: a call mentioned in the reasoning is never executed.

`CallStartFinder.find(response_ids)` returns the index of the token holding the first character of the first
call, for the SAAR splice. Each token id is decoded once (cached), so it is linear in the turn length.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from cleaner.tools.code_interpreter import CODE_ARG, TOOL_NAME

REASONING_END = "</think>"
TAG_START, TAG_END = "<tool_call>", "</tool_call>"

_JSON_FENCE = re.compile(r"```json[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_BARE_CALL_START = re.compile(r'\{\s*"(?:name|arguments|parameters)"\s*:')
_PYTHON_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_MAX_BARE_ATTEMPTS = 16  # bounds the work on text full of `{"name":`-looking fragments


@dataclass(frozen=True)
class CallSpan:
    start: int  # character offsets of the whole call (markers included) in the searched text
    end: int
    name: str
    arguments: str  # JSON object text, as verl's FunctionCall expects


def _as_call(obj: Any) -> tuple[str, str] | None:
    """(name, arguments JSON) if `obj` looks like a function call, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(arguments, str):
        return obj["name"], arguments  # verl reports it to the model if it is not valid JSON
    return obj["name"], json.dumps(arguments, ensure_ascii=False)


def _json_call(text: str) -> tuple[str, str] | None:
    try:
        return _as_call(json.loads(text))
    except json.JSONDecodeError:
        return None


def _tagged_calls(text: str, region: int) -> list[CallSpan]:
    calls = []
    cursor = region
    while True:
        end = text.find(TAG_END, cursor)
        if end < 0:
            return calls
        start = text.rfind(TAG_START, cursor, end)
        if start >= 0:
            call = _json_call(text[start + len(TAG_START) : end])
            if call is not None:
                calls.append(CallSpan(start, end + len(TAG_END), *call))
        cursor = end + len(TAG_END)


def _fenced_json_calls(text: str, region: int) -> list[CallSpan]:
    calls = []
    for match in _JSON_FENCE.finditer(text, region):
        call = _json_call(match.group(1))
        if call is not None:
            calls.append(CallSpan(match.start(), match.end(), *call))
    return calls


def _bare_json_calls(text: str, region: int) -> list[CallSpan]:
    decoder = json.JSONDecoder()
    calls = []
    attempts = 0
    position = region
    while attempts < _MAX_BARE_ATTEMPTS:
        match = _BARE_CALL_START.search(text, position)
        if match is None:
            break
        attempts += 1
        try:
            obj, end = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            position = match.end()
            continue
        call = _as_call(obj)
        if call is not None:
            calls.append(CallSpan(match.start(), end, *call))
        position = end
    return calls


def _python_block_calls(text: str, region: int) -> list[CallSpan]:
    calls = []
    for match in _PYTHON_BLOCK.finditer(text, region):
        code = match.group(1)
        if code.strip():
            arguments = json.dumps({CODE_ARG: code}, ensure_ascii=False)
            calls.append(CallSpan(match.start(), match.end(), TOOL_NAME, arguments))
    return calls


def locate_calls(text: str, python_blocks: bool = True) -> list[CallSpan]:
    """The calls of the first form (in priority order) that has any, after the reasoning."""
    last_reasoning_end = text.rfind(REASONING_END)
    region = 0 if last_reasoning_end < 0 else last_reasoning_end + len(REASONING_END)
    finders = [_tagged_calls, _fenced_json_calls, _bare_json_calls]
    if python_blocks:
        finders.append(_python_block_calls)
    for finder in finders:
        calls = finder(text, region)
        if calls:
            return calls
    return []


def without_calls(text: str, calls: Sequence[CallSpan]) -> str:
    kept, cursor = [], 0
    for call in calls:
        kept.append(text[cursor : call.start])
        cursor = call.end
    kept.append(text[cursor:])
    return "".join(kept)


class CallStartFinder:
    """Token index of the first call in a turn; caches each token id's decoded piece across turns."""

    def __init__(self, tokenizer, python_blocks: bool) -> None:
        self.tokenizer = tokenizer
        self.python_blocks = python_blocks
        self._pieces: dict[int, str] = {}

    def find(self, response_ids: Sequence[int]) -> int | None:
        """Index in `response_ids` of the token holding the first character of the first call, or None."""
        pieces = [self._piece(token_id) for token_id in response_ids]
        calls = locate_calls("".join(pieces), self.python_blocks)
        if not calls:
            return None
        # ends[i] is the character offset where token i ends; the boundary token is the one holding the start.
        ends = list(accumulate(len(piece) for piece in pieces))
        return bisect_right(ends, calls[0].start)

    def _piece(self, token_id: int) -> str:
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self.tokenizer.decode([token_id])
        return piece
