"""Negative samples (opt-in, `multi_turn.save_negative_samples`): the failed attempts SAAR purifies away,
kept as extra training samples paired with the call that replaced them.

For each *recovered* position the negative is the position's first failed attempt, in its own context:
the trajectory as it stood just before the failed turn, followed by that turn. Its loss mask covers only
the failed call (from the call boundary to the end of the turn; the whole turn if the turn has no
boundary). The first attempt is the one whose context the purified trajectory shares: the successful
call replaced it at exactly that point, so the pair differs only in the call. Failed retries were sampled
after the error feedback, a context the purified trajectory no longer contains, and are not kept.

A pair is linked by an id on both sides: the negative's link gives its failed call's token span, the
positive trajectory's links give the span of the successful call that replaced it. Spans are
`[start, end)` in response-token coordinates of their own sample. At most `limit` negatives are kept per
trajectory; the others, and any whose span `response_length` cuts away or whose trajectory is not trained,
are counted as dropped.

Pure: lists and ints only, so the estimator side (cleaner.verl.tool_dpo) and the agent loop share one
definition of the fields.
"""

from __future__ import annotations

import numbers
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cleaner.saar.splice import SpliceMode, StreamLengths

# extra_fields keys, set on every output of a trajectory when negatives are on (verl needs the same keys
# on every row).
NEGATIVE_SAMPLE_KEY = "negative_sample"  # True on a negative, False on the trajectory itself
NEGATIVE_LINKS_KEY = "negative_links"  # [{"id", "start", "end"}]: one per pair this sample is part of
NEGATIVES_DROPPED_KEY = "negatives_dropped"  # recovered failures of this trajectory that were not kept
NEGATIVE_FIELD_KEYS = (NEGATIVE_SAMPLE_KEY, NEGATIVE_LINKS_KEY, NEGATIVES_DROPPED_KEY)


class NegativeFieldsError(ValueError):
    """A sample's negative-sample fields are missing or malformed."""


@dataclass(frozen=True)
class CallSpan:
    """`[start, end)` in response-token coordinates."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"a call span needs 0 <= start < end, got [{self.start}, {self.end})")

    def __len__(self) -> int:
        return self.end - self.start

    def clipped(self, length: int) -> CallSpan | None:
        """The part of the span below `length`; None when nothing is left."""
        end = min(self.end, length)
        return CallSpan(self.start, end) if end > self.start else None


@dataclass(frozen=True)
class FailedAttempt:
    """A failed first attempt as a sample: the whole stream (prompt + response) and its response side."""

    ids: list[int]
    mask: list[int]  # response side: 1 only on the failed call's tokens
    logprobs: list[float] | None  # response side, as the server reported them (None without log-probs)
    call: CallSpan
    num_turns: int  # verl's count for the sample: user turns + assistant turns (the failed one included) + 1

    @property
    def prompt_length(self) -> int:
        return len(self.ids) - len(self.mask)


def failed_attempt(
    ids: Sequence[int],
    mask: Sequence[int],
    logprobs: Sequence[float] | None,
    base: StreamLengths,
    failed_ids: Sequence[int],
    failed_logprobs: Sequence[float] | None,
    failed_boundary: int | None,
    num_turns: int,
) -> FailedAttempt:
    """The negative sample of a failed turn appended at `base` of the running stream (`ids`, `mask`, `logprobs`)."""
    if not failed_ids:
        raise ValueError("a failed attempt needs the failed turn's tokens")
    if base.ids > len(ids) or base.mask > len(mask):
        raise ValueError(f"base {base} lies beyond the stream ({len(ids)} ids, {len(mask)} mask)")
    call_start = 0 if failed_boundary is None else failed_boundary
    if not 0 <= call_start < len(failed_ids):
        raise ValueError(f"call boundary {failed_boundary} outside the failed turn of {len(failed_ids)} tokens")
    turn_mask = [0] * call_start + [1] * (len(failed_ids) - call_start)
    sample_logprobs = None
    if logprobs is not None and failed_logprobs is not None:
        sample_logprobs = [*logprobs[: base.logprobs], *failed_logprobs]
    return FailedAttempt(
        ids=[*ids[: base.ids], *failed_ids],
        mask=[0] * base.mask + turn_mask,
        logprobs=sample_logprobs,
        call=CallSpan(base.mask + call_start, base.mask + len(failed_ids)),
        num_turns=num_turns,
    )


def success_span(spliced_start: int, spliced_end: int, mode: SpliceMode, replacement_boundary: int | None) -> CallSpan:
    """The successful call's tokens in the purified response, from the splice's span of resampled tokens.

    Shallow: the spliced tokens are the call. Deep: the whole new turn was spliced; the call starts at its
    boundary (the whole turn without one), as for the negative.
    """
    start = spliced_start
    if mode == "deep" and replacement_boundary is not None:
        start += replacement_boundary
    return CallSpan(start, spliced_end)


@dataclass(frozen=True)
class NegativePair:
    pair_id: str
    negative: FailedAttempt
    success: CallSpan  # in the positive trajectory's response


@dataclass
class NegativeCollector:
    """The negatives of one trajectory: at most `limit` pairs, the rest counted as dropped."""

    limit: int
    pairs: list[NegativePair] = field(default_factory=list)
    dropped: int = 0

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"a negative collector needs a limit >= 1, got {self.limit}")

    @property
    def full(self) -> bool:
        return len(self.pairs) >= self.limit

    def offer(self, negative: FailedAttempt, success: CallSpan) -> None:
        if self.full:
            self.dropped += 1
            return
        self.pairs.append(NegativePair(uuid.uuid4().hex, negative, success))

    def finish(self, response_length: int, positive_mask: Sequence[int]) -> tuple[list[NegativePair], int]:
        """The pairs that survive, with spans clipped, and the number of dropped negatives.

        `positive_mask` is the trajectory's final response mask (after verl's cut at `response_length`). A pair
        is dropped when the cut leaves nothing of either call, or when none of the successful call's tokens is
        trained: a trajectory returned empty after an error, or one whose mask was zeroed
        (`drop_infra_error_trajectories`), takes its negatives with it.
        """
        kept, dropped = [], self.dropped
        for pair in self.pairs:
            success = pair.success.clipped(len(positive_mask))
            call = pair.negative.call.clipped(response_length)
            if success is None or call is None or not any(positive_mask[success.start : success.end]):
                dropped += 1
                continue
            kept.append(replace(pair, negative=replace(pair.negative, call=call), success=success))
        return kept, dropped


def link(pair_id: str, span: CallSpan) -> dict[str, Any]:
    return {"id": pair_id, "start": span.start, "end": span.end}


def positive_fields(pairs: Sequence[NegativePair], dropped: int) -> dict[str, Any]:
    """The negative-sample fields of the trajectory itself."""
    return {
        NEGATIVE_SAMPLE_KEY: False,
        NEGATIVE_LINKS_KEY: [link(pair.pair_id, pair.success) for pair in pairs],
        NEGATIVES_DROPPED_KEY: dropped,
    }


def negative_fields(pair: NegativePair) -> dict[str, Any]:
    """The negative-sample fields of one negative."""
    return {
        NEGATIVE_SAMPLE_KEY: True,
        NEGATIVE_LINKS_KEY: [link(pair.pair_id, pair.negative.call)],
        NEGATIVES_DROPPED_KEY: 0,
    }


@dataclass(frozen=True)
class Link:
    pair_id: str
    span: CallSpan


@dataclass(frozen=True)
class SampleLinks:
    """What the estimator needs to know of one sample."""

    negative: bool
    links: tuple[Link, ...]
    dropped: int


def read_sample_links(extra_fields: Mapping[str, Any]) -> SampleLinks:
    """Parse one sample's negative-sample fields; raise `NegativeFieldsError` naming what is wrong."""
    missing = [key for key in NEGATIVE_FIELD_KEYS if key not in extra_fields]
    if missing:
        raise NegativeFieldsError(
            f"sample has no {', '.join(missing)} in its extra_fields: it was not produced by the cleaner agent "
            "loop with actor_rollout_ref.rollout.multi_turn.save_negative_samples=True"
        )
    negative = extra_fields[NEGATIVE_SAMPLE_KEY]
    # `in` rather than isinstance: a row read back from a columnar store may hold numpy booleans.
    if negative not in (True, False):
        raise NegativeFieldsError(f"{NEGATIVE_SAMPLE_KEY} must be true or false, got {negative!r}")
    negative = bool(negative)
    raw_links = extra_fields[NEGATIVE_LINKS_KEY]
    if isinstance(raw_links, (str, bytes, Mapping)) or not isinstance(raw_links, Sequence):
        raise NegativeFieldsError(f"{NEGATIVE_LINKS_KEY} must be a list of links, got {raw_links!r}")
    links = []
    for raw in raw_links:
        try:
            links.append(Link(str(raw["id"]), CallSpan(int(raw["start"]), int(raw["end"]))))
        except (KeyError, TypeError, ValueError) as exc:
            raise NegativeFieldsError(f"bad {NEGATIVE_LINKS_KEY} entry {raw!r}: {exc}") from exc
    if negative and len(links) != 1:
        raise NegativeFieldsError(f"a negative sample has exactly one link, got {len(links)}")
    dropped = extra_fields[NEGATIVES_DROPPED_KEY]
    if isinstance(dropped, bool) or not isinstance(dropped, numbers.Integral) or dropped < 0:
        raise NegativeFieldsError(f"{NEGATIVES_DROPPED_KEY} must be an integer >= 0, got {dropped!r}")
    return SampleLinks(negative, tuple(links), int(dropped))
