"""Where the tool call starts inside one generated assistant turn, found in linear time.

"The call" is the span the tool parser executes: after the reasoning block (text before the last
`</think>` is never a call), the first end marker closes it, and it opens at the last start marker
before that end marker. So a start marker merely mentioned in the reasoning, or in prose before the
real call, does not mis-split the turn. The split is token-granular: the boundary is the index of
the token holding the first character of the start marker.

Two paths, both O(len(turn)):
- every marker is one token of the vocabulary (Qwen's `<tool_call>`): list scans over the ids, in C;
- otherwise (multi-token fences such as ```` ```python ````): each token id is decoded once per
  tokenizer (cached), the pieces are joined, and character offsets are mapped back to token indices.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Protocol


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class CallMarkers:
    start: str
    end: str | None  # None: the call runs from the start marker to the end of the turn
    reasoning_end: str | None = "</think>"

    def __post_init__(self) -> None:
        if not self.start:
            raise ValueError("CallMarkers.start must be a non-empty string")
        if self.end == "" or self.reasoning_end == "":
            raise ValueError("CallMarkers.end / reasoning_end must be None or a non-empty string")


# Markers of verl's tool parsers (`actor_rollout_ref.rollout.multi_turn.format`) that SAAR supports.
MARKERS_BY_FORMAT: dict[str, CallMarkers] = {
    "hermes": CallMarkers(start="<tool_call>", end="</tool_call>"),
    "qwen3_coder": CallMarkers(start="<tool_call>", end="</tool_call>"),
}


def markers_for_format(tool_format: str) -> CallMarkers:
    try:
        return MARKERS_BY_FORMAT[tool_format]
    except KeyError:
        raise ValueError(
            f"SAAR does not know where tool calls start for multi_turn.format={tool_format!r}; "
            f"supported formats: {sorted(MARKERS_BY_FORMAT)}, or a parser with a find_call_start(ids) method"
        ) from None


class BoundaryFinder:
    def __init__(self, tokenizer: Tokenizer, markers: CallMarkers):
        self.tokenizer = tokenizer
        self.markers = markers
        self._pieces: dict[int, str] = {}
        start_id = self._single_token_id(markers.start)
        end_id = self._single_token_id(markers.end) if markers.end else None
        reasoning_id = self._single_token_id(markers.reasoning_end) if markers.reasoning_end else None
        single = start_id is not None and (markers.end is None or end_id is not None)
        single = single and (markers.reasoning_end is None or reasoning_id is not None)
        self._token_markers = (start_id, end_id, reasoning_id) if single else None

    def _single_token_id(self, marker: str) -> int | None:
        ids = self.tokenizer.encode(marker, add_special_tokens=False)
        if len(ids) == 1 and self.tokenizer.decode(ids) == marker:
            return ids[0]
        return None

    def find(self, turn_ids: Sequence[int]) -> int | None:
        """Index in `turn_ids` of the first token of the call, or None if the turn has no complete call."""
        if self._token_markers is not None:
            found = _find_in_ids(list(turn_ids), *self._token_markers)
            if found is not None:
                return found
        return self._find_in_text(turn_ids)

    def _find_in_text(self, turn_ids: Sequence[int]) -> int | None:
        pieces = list(map(self._pieces.get, turn_ids))
        if None in pieces:
            for index, token_id in enumerate(turn_ids):
                if pieces[index] is None:
                    pieces[index] = self._pieces.setdefault(token_id, self.tokenizer.decode([token_id]))
        text = "".join(pieces)
        markers = self.markers
        region = 0
        if markers.reasoning_end:
            last = text.rfind(markers.reasoning_end)
            region = 0 if last < 0 else last + len(markers.reasoning_end)
        start = text.find(markers.start, region)
        if start < 0:
            return None
        if markers.end:
            end = text.find(markers.end, start + len(markers.start))
            if end < 0:
                return None
            start = text.rfind(markers.start, start, end)
        # ends[i] is the character offset where token i ends; the boundary token is the one holding `start`.
        ends = list(accumulate(map(len, pieces)))
        return bisect_right(ends, start)


def _find_in_ids(ids: list[int], start_id: int, end_id: int | None, reasoning_id: int | None) -> int | None:
    region = 0
    if reasoning_id is not None and reasoning_id in ids:
        region = len(ids) - ids[::-1].index(reasoning_id)
    try:
        start = ids.index(start_id, region)
    except ValueError:
        return None
    if end_id is None:
        return start
    try:
        end = ids.index(end_id, start + 1)
    except ValueError:
        return None
    # the last start marker before the first end marker opens the executed call
    return end - 1 - ids[start:end][::-1].index(start_id)
