"""The `purify/*` audit of a training batch as tensor operations: the trainer's version of `cleaner.purify.audit`.

`cleaner.purify.audit.audit_row` is the definition (token by token, for recorded trajectories and as the test
oracle); this module gives the same `AuditCounts` for a whole batch without a per-token Python loop. Every figure
counts trained tokens of some kind inside some spans (turns, calls, splices, kept failed calls, whole rows). Three
per-token values are summed: the loss mask (trained tokens), the advantage's sign on trained tokens and its absolute
value; a span's positive-advantage tokens are (|sign| + sign) / 2, its negative ones (|sign| - sign) / 2. The batch
is flattened and cut at every span's ends; `numpy.add.reduceat` sums each piece in one read of the tokens (no running
sum is written per token), and a span's count is a difference of the pieces' running sums (float64, exact). Python
only walks the spans of the per-turn and failed-call records. Rows are taken in blocks so the per-token temporaries
stay small at the recipes' 2,048 rows of 20,480 tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from cleaner.purify.audit import REPLACEMENT_KINDS, AuditCounts, counts_metrics
from cleaner.purify.config import Purification
from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY
from cleaner.saar.negatives import NEGATIVE_SAMPLE_KEY
from cleaner.saar.stats import PREFIX as SAAR_PREFIX

SPLICED_SPANS = SAAR_PREFIX + "spliced_spans"
BLOCK_ROWS = 256  # rows per block: 2 x 256 x 20,480 float32 temporaries, about 40 MB
MAX_TOKENS = 1 << 24  # a float32 piece sum counts every integer up to here exactly


@dataclass
class _Spans:
    """`[start, end)` spans of batch rows, gathered from the records before any tensor work."""

    rows: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)

    def add(self, row: int, start: Any, end: Any) -> None:
        self.rows.append(row)
        self.starts.append(int(start))
        self.ends.append(int(end))

    def arrays(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows, starts and ends, clipped to `[0, length]` (an end before its start leaves an empty span)."""
        starts = np.clip(np.asarray(self.starts, dtype=np.int64), 0, length)
        ends = np.clip(np.asarray(self.ends, dtype=np.int64), 0, length)
        return np.asarray(self.rows, dtype=np.int64), starts, np.maximum(starts, ends)


@dataclass
class _BatchSpans:
    failed_turns: _Spans = field(default_factory=_Spans)
    failed_code: _Spans = field(default_factory=_Spans)
    succeeded_turns: _Spans = field(default_factory=_Spans)
    spliced: _Spans = field(default_factory=_Spans)  # merged per row: a token in two spans counts once
    replacement: _Spans = field(default_factory=_Spans)
    kept_failed: _Spans = field(default_factory=_Spans)
    kept_failed_code: _Spans = field(default_factory=_Spans)


def _merged(spans: Sequence[Sequence]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted((int(span[0]), int(span[1])) for span in spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _record_counts(extra: Sequence[Mapping[str, Any] | None], masks: torch.Tensor) -> tuple[AuditCounts, _BatchSpans]:
    """What the records give without looking at a token (failed calls generated, generated tokens), and the spans."""
    spans = _BatchSpans()
    trajectories = unrecorded = generated = calls = tokens = code_tokens = rolled_back = 0
    for row, fields in enumerate(extra):
        fields = fields or {}
        if fields.get(NEGATIVE_SAMPLE_KEY):
            continue
        trajectories += 1
        # A row of another agent loop (tool_agent, single_turn_agent) never resamples: it generated its model tokens.
        generated += int(fields.get(GENERATED_TOKENS_KEY) or int(masks[row].ne(0).sum()))
        for turn in fields.get(TURNS_KEY) or ():
            if turn["failed"]:
                spans.failed_turns.add(row, turn["start"], turn["end"])
                if turn["code_start"] is not None:
                    spans.failed_code.add(row, turn["code_start"], turn["code_end"])
            elif turn["call"]:
                spans.succeeded_turns.add(row, turn["start"], turn["end"])
        spliced = fields.get(SPLICED_SPANS) or ()
        for start, end in _merged(spliced):
            spans.spliced.add(row, start, end)
        for span in spliced:
            if span[3] in REPLACEMENT_KINDS:
                spans.replacement.add(row, span[0], span[1])
        failed_calls = fields.get(FAILED_CALLS_KEY)
        if failed_calls is None:
            unrecorded += 1
            continue
        for call in failed_calls:
            calls += 1
            tokens += int(call["turn_tokens"])
            code_tokens += int(call["call_tokens"])
            rolled_back += int(call["turn_tokens"]) if call["fate"] == "rolled_back" else 0
            if call["fate"] == "kept":
                spans.kept_failed.add(row, call["start"], call["end"])
                if call["code_start"] is not None:
                    spans.kept_failed_code.add(row, call["code_start"], call["code_end"])
    counts = AuditCounts(
        trajectories=trajectories,
        generated=generated,
        failed_unrecorded=unrecorded,
        failed_calls=calls,
        failed_tokens=tokens,
        failed_code_tokens=code_tokens,
        failed_rolled_back=rolled_back,
    )
    return counts, spans


def _padded(rows: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """A (rows, tokens) tensor of a 2-D tensor or of 1-D rows of any lengths (zero-padded)."""
    if isinstance(rows, torch.Tensor) and not rows.is_nested:
        return rows
    rows = list(rows.unbind(0)) if isinstance(rows, torch.Tensor) else list(rows)
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)


def _whole_rows(rows: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return rows, np.zeros(len(rows), np.int64), np.full(len(rows), length, np.int64)


def _block_values(mask: torch.Tensor, advantage: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The block's (0/1) loss mask and the advantage's sign on trained tokens, flattened (float32). numpy's
    elementwise kernels run these without torch's per-op threading overhead."""
    trained = mask.detach().cpu().contiguous().numpy().reshape(-1).astype(np.float32, copy=False)
    signs = np.sign(advantage.detach().cpu().to(torch.float32).contiguous().numpy().reshape(-1))
    return trained, np.multiply(signs, trained, out=signs)


def _sums_at(values: np.ndarray, points: np.ndarray) -> np.ndarray:
    """`values[:point].sum()` for each point (sorted, unique, 0 first and `len(values)` last), in float64."""
    if values.size == 0:
        return np.zeros(len(points))
    pieces = np.add.reduceat(values, points[:-1]).astype(np.float64)
    return np.concatenate(([0.0], np.cumsum(pieces)))


def _counts(trained: np.ndarray, signed: np.ndarray, nonzero: np.ndarray) -> tuple[int, int, int, np.ndarray]:
    """Total trained, positive- and negative-advantage tokens of spans, and each span's trained tokens."""
    trained_spans = np.rint(trained).astype(np.int64)
    positive = int(np.rint((nonzero + signed) / 2).sum())
    negative = int(np.rint((nonzero - signed) / 2).sum())
    return int(trained_spans.sum()), positive, negative, trained_spans


def _block_counts(
    values: tuple[np.ndarray, np.ndarray], spans: dict[str, tuple[np.ndarray, ...]], block: slice, length: int
) -> dict[str, tuple[int, int, int, np.ndarray]]:
    """Per kind of span, the counts (`_counts`) of the spans of the block's rows."""
    trained, signed = values
    local = {}  # each span's start and end in the flattened block
    for name, (rows, starts, ends) in spans.items():
        inside = (rows >= block.start) & (rows < block.stop)
        base = (rows[inside] - block.start) * length
        local[name] = (base + starts[inside], base + ends[inside])
    points = np.unique(np.concatenate([[0, trained.size], *(edge for pair in local.values() for edge in pair)]))
    sums = [_sums_at(trained, points), _sums_at(signed, points)]
    sums.append(_sums_at(np.abs(signed, out=signed), points))
    counts = {}
    for name, (starts, ends) in local.items():
        first, last = np.searchsorted(points, starts), np.searchsorted(points, ends)
        counts[name] = _counts(*(running[last] - running[first] for running in sums))
    return counts


def batch_audit_counts(
    extra: Sequence[Mapping[str, Any] | None],
    masks: torch.Tensor | Sequence[torch.Tensor],
    advantages: torch.Tensor | Sequence[torch.Tensor],
) -> AuditCounts:
    """The audit counts of a batch: per row its `extra_fields`, its loss mask and its per-token advantages (as in
    `cleaner.purify.audit.audit_row` for each row; negative samples count only towards the failed-call figures)."""
    mask, advantage = _padded(masks), _padded(advantages)
    if advantage.shape[1] < mask.shape[1]:
        raise ValueError(f"{advantage.shape[1]} advantages for responses of {mask.shape[1]} tokens")
    if mask.shape[1] > MAX_TOKENS:
        raise ValueError(f"responses of {mask.shape[1]} tokens: the batch audit counts up to {MAX_TOKENS} per row")
    advantage = advantage[:, : mask.shape[1]]
    if len(extra) != mask.shape[0]:
        raise ValueError(f"{len(extra)} rows of extra fields for a batch of {mask.shape[0]} rows")
    counts, spans = _record_counts(extra, mask)
    length = mask.shape[1]
    negative_rows = np.array([bool((fields or {}).get(NEGATIVE_SAMPLE_KEY)) for fields in extra], dtype=bool)
    rows = np.arange(mask.shape[0])
    gathered = {
        "trajectories": _whole_rows(rows[~negative_rows], length),
        "negative_samples": _whole_rows(rows[negative_rows], length),
        **{name: getattr(spans, name).arrays(length) for name in vars(spans)},
    }
    sums = dict.fromkeys(
        ("dropped", "trained", "positive", "negative", "positive_on_failed_turn", "positive_on_failed_code",
         "negative_on_successful_call", "offpolicy", "failed_reinforced", "failed_penalized", "failed_code_reinforced",
         "failed_code_penalized", "replacement", "replacement_reinforced"),
        0,
    )  # fmt: skip
    for first in range(0, mask.shape[0], BLOCK_ROWS):
        block = slice(first, min(first + BLOCK_ROWS, mask.shape[0]))
        found = _block_counts(_block_values(mask[block], advantage[block]), gathered, block, length)
        trained, positive, negative, per_row = found["trajectories"]
        sums["dropped"] += int((per_row == 0).sum())
        sums["trained"] += trained
        sums["positive"] += positive
        sums["negative"] += negative
        # a negative sample trains only its failed call: its tokens are failed-call tokens, code tokens too
        _, positive, negative, _ = found["negative_samples"]
        sums["failed_reinforced"] += positive
        sums["failed_code_reinforced"] += positive
        sums["failed_penalized"] += negative
        sums["failed_code_penalized"] += negative
        sums["positive_on_failed_turn"] += found["failed_turns"][1]
        sums["positive_on_failed_code"] += found["failed_code"][1]
        sums["negative_on_successful_call"] += found["succeeded_turns"][2]
        sums["offpolicy"] += found["spliced"][0]
        sums["failed_reinforced"] += found["kept_failed"][1]
        sums["failed_penalized"] += found["kept_failed"][2]
        sums["failed_code_reinforced"] += found["kept_failed_code"][1]
        sums["failed_code_penalized"] += found["kept_failed_code"][2]
        sums["replacement"] += found["replacement"][0]
        sums["replacement_reinforced"] += found["replacement"][1]
    return counts + AuditCounts(**sums)


def batch_audit_metrics(
    extra: Sequence[Mapping[str, Any] | None],
    masks: torch.Tensor | Sequence[torch.Tensor],
    advantages: torch.Tensor | Sequence[torch.Tensor],
    mode: Purification | None,
) -> dict[str, float]:
    """The batch's `purify/*` metrics (`cleaner.purify.audit.counts_metrics`); {} for a batch without rows."""
    if len(extra) == 0:
        return {}
    return counts_metrics(batch_audit_counts(extra, masks, advantages), mode)
