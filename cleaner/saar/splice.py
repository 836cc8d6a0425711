"""Rebuild the running token stream after a recovered rollback: token-exact, no decode/re-encode.

The stream is verl's view of a trajectory: `ids` (prompt + response so far), `mask` and `logprobs`
(response side only, so `ids[len(ids) - len(mask):]` is the response). A splice starts from the
*base*: the stream as it was just before the failed assistant turn was appended. Everything after
the base (the failed turn, the error feedback, failed retries) is dropped, and the replacement goes
in its place:
- deep:    base + the whole successful turn;
- shallow: base + the failed turn's reasoning (up to its call boundary) + the successful turn's call.
Every appended token is one the server sampled, with the log-prob it reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

SpliceMode = Literal["shallow", "deep"]


@dataclass(frozen=True)
class GeneratedTurn:
    """One assistant generation as the server returned it."""

    ids: Sequence[int]
    logprobs: Sequence[float] | None
    boundary: int | None  # index of the call's first token (see boundary.py); None if not found

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.ids):
            raise ValueError(f"turn has {len(self.ids)} tokens but {len(self.logprobs)} log-probs")


@dataclass(frozen=True)
class StreamLengths:
    """Where the base ends, as list lengths of the running stream (taking it costs O(1))."""

    ids: int
    mask: int
    logprobs: int


@dataclass(frozen=True)
class SpliceResult:
    ids: list[int]
    mask: list[int]
    logprobs: list[float] | None
    turn_ids: list[int]  # the purified assistant turn as it now stands in the stream
    spliced_start: int  # [start, end) in response coordinates: the tokens that came from the resample
    spliced_end: int


def splice(
    ids: Sequence[int],
    mask: Sequence[int],
    logprobs: Sequence[float] | None,
    base: StreamLengths,
    failed: GeneratedTurn,
    replacement: GeneratedTurn,
    mode: SpliceMode,
) -> SpliceResult:
    if base.ids > len(ids) or base.mask > len(mask) or (logprobs is not None and base.logprobs > len(logprobs)):
        raise ValueError(f"splice base {base} lies beyond the stream ({len(ids)} ids, {len(mask)} mask)")
    if mode == "shallow":
        if failed.boundary is None or replacement.boundary is None:
            raise ValueError("a shallow splice needs the call boundary of both turns")
        kept_ids, kept_lp = failed.ids[: failed.boundary], _cut(failed.logprobs, 0, failed.boundary)
        new_ids = replacement.ids[replacement.boundary :]
        new_lp = _cut(replacement.logprobs, replacement.boundary, len(replacement.ids))
    elif mode == "deep":
        kept_ids, kept_lp = (), ()
        new_ids, new_lp = replacement.ids, replacement.logprobs
    else:
        raise ValueError(f"unknown splice mode {mode!r}")

    turn_ids = [*kept_ids, *new_ids]
    out_ids = [*ids[: base.ids], *turn_ids]
    out_mask = [*mask[: base.mask], *([1] * len(turn_ids))]
    out_logprobs = None
    if logprobs is not None:
        if failed.logprobs is None or replacement.logprobs is None:
            raise ValueError("the stream carries log-probs but a spliced turn has none")
        out_logprobs = [*logprobs[: base.logprobs], *kept_lp, *new_lp]
    spliced_start = base.mask + len(kept_ids)
    return SpliceResult(out_ids, out_mask, out_logprobs, turn_ids, spliced_start, spliced_start + len(new_ids))


def _cut(values: Sequence[float] | None, start: int, end: int) -> Sequence[float]:
    return () if values is None else values[start:end]
