"""The `purify/*` audit of a training batch as tensor operations: the trainer's version of `cleaner.purify.audit`.

`cleaner.purify.audit.audit_row` is the definition (token by token, for recorded trajectories and as the test
oracle); this module gives the same `AuditCounts` for a whole batch without a per-token Python loop. Every figure
counts trained tokens of some kind inside some spans (turns, calls, splices, kept failed calls), so per row it takes
prefix sums of the trained, positive-advantage and negative-advantage tokens and reads each span's count as the
difference of two prefix sums; Python only walks the spans of the per-turn and failed-call records. Rows are taken
in blocks so the prefix sums stay small at the recipes' 2,048 rows of 20,480 tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cleaner.purify.audit import REPLACEMENT_KINDS, AuditCounts, counts_metrics
from cleaner.purify.config import Purification
from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY
from cleaner.saar.negatives import NEGATIVE_SAMPLE_KEY
from cleaner.saar.stats import PREFIX as SAAR_PREFIX

SPLICED_SPANS = SAAR_PREFIX + "spliced_spans"
BLOCK_ROWS = 256  # rows per block of prefix sums: 3 x 256 x 20,481 int32 is about 60 MB


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

    def tensors(self, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = torch.tensor(self.rows, dtype=torch.long)
        starts = torch.tensor(self.starts, dtype=torch.long).clamp(0, length)
        ends = torch.tensor(self.ends, dtype=torch.long).clamp(0, length)
        return rows, starts, torch.maximum(starts, ends)


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


def _padded(rows: torch.Tensor | Sequence[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """A (rows, tokens) tensor of a 2-D tensor or of 1-D rows of any lengths (zero-padded)."""
    if isinstance(rows, torch.Tensor) and not rows.is_nested:
        return rows.to(dtype)
    rows = list(rows.unbind(0)) if isinstance(rows, torch.Tensor) else list(rows)
    return torch.nn.utils.rnn.pad_sequence([row.to(dtype) for row in rows], batch_first=True)


def _span_sums(prefix: torch.Tensor, spans: tuple[torch.Tensor, ...], block: slice) -> int:
    """Tokens counted by `prefix` (a block's prefix sums) inside the spans of the block's rows."""
    rows, starts, ends = spans
    inside = (rows >= block.start) & (rows < block.stop)
    local = rows[inside] - block.start
    return int((prefix[local, ends[inside]] - prefix[local, starts[inside]]).sum())


def _prefix(tokens: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(torch.cumsum(tokens, dim=1, dtype=torch.int32), (1, 0))


def batch_audit_counts(
    extra: Sequence[Mapping[str, Any] | None],
    masks: torch.Tensor | Sequence[torch.Tensor],
    advantages: torch.Tensor | Sequence[torch.Tensor],
) -> AuditCounts:
    """The audit counts of a batch: per row its `extra_fields`, its loss mask and its per-token advantages (as in
    `cleaner.purify.audit.audit_row` for each row; negative samples count only towards the failed-call figures)."""
    mask = _padded(masks, torch.int32)
    advantage = _padded(advantages, torch.float32)
    if advantage.shape[1] < mask.shape[1]:
        raise ValueError(f"{advantage.shape[1]} advantages for responses of {mask.shape[1]} tokens")
    advantage = advantage[:, : mask.shape[1]]
    if len(extra) != mask.shape[0]:
        raise ValueError(f"{len(extra)} rows of extra fields for a batch of {mask.shape[0]} rows")
    counts, spans = _record_counts(extra, mask)
    length = mask.shape[1]
    gathered = {name: getattr(spans, name).tensors(length) for name in vars(spans)}
    negative_rows = torch.tensor([bool((fields or {}).get(NEGATIVE_SAMPLE_KEY)) for fields in extra], dtype=torch.bool)
    totals = dict.fromkeys(
        ("dropped", "trained", "positive", "negative", "negative_reinforced", "negative_penalized"), 0
    )
    sums = dict.fromkeys(
        ("positive_on_failed_turn", "positive_on_failed_code", "negative_on_successful_call", "offpolicy",
         "failed_reinforced", "failed_penalized", "failed_code_reinforced", "failed_code_penalized", "replacement",
         "replacement_reinforced"),
        0,
    )  # fmt: skip
    for first in range(0, mask.shape[0], BLOCK_ROWS):
        block = slice(first, min(first + BLOCK_ROWS, mask.shape[0]))
        trained = mask[block] != 0
        positive = trained & (advantage[block] > 0)
        negative = trained & (advantage[block] < 0)
        per_row = torch.stack([trained.sum(1), positive.sum(1), negative.sum(1)], dim=1)
        is_negative = negative_rows[block]
        trajectory_rows = per_row[~is_negative]
        totals["dropped"] += int((trajectory_rows[:, 0] == 0).sum())
        totals["trained"] += int(trajectory_rows[:, 0].sum())
        totals["positive"] += int(trajectory_rows[:, 1].sum())
        totals["negative"] += int(trajectory_rows[:, 2].sum())
        totals["negative_reinforced"] += int(per_row[is_negative, 1].sum())
        totals["negative_penalized"] += int(per_row[is_negative, 2].sum())
        trained_sums, positive_sums, negative_sums = _prefix(trained), _prefix(positive), _prefix(negative)
        sums["positive_on_failed_turn"] += _span_sums(positive_sums, gathered["failed_turns"], block)
        sums["positive_on_failed_code"] += _span_sums(positive_sums, gathered["failed_code"], block)
        sums["negative_on_successful_call"] += _span_sums(negative_sums, gathered["succeeded_turns"], block)
        sums["offpolicy"] += _span_sums(trained_sums, gathered["spliced"], block)
        sums["failed_reinforced"] += _span_sums(positive_sums, gathered["kept_failed"], block)
        sums["failed_penalized"] += _span_sums(negative_sums, gathered["kept_failed"], block)
        sums["failed_code_reinforced"] += _span_sums(positive_sums, gathered["kept_failed_code"], block)
        sums["failed_code_penalized"] += _span_sums(negative_sums, gathered["kept_failed_code"], block)
        sums["replacement"] += _span_sums(trained_sums, gathered["replacement"], block)
        sums["replacement_reinforced"] += _span_sums(positive_sums, gathered["replacement"], block)
    # a negative sample trains only its failed call: its tokens are failed-call tokens, code tokens too
    for name in ("failed_reinforced", "failed_code_reinforced"):
        sums[name] += totals["negative_reinforced"]
    for name in ("failed_penalized", "failed_code_penalized"):
        sums[name] += totals["negative_penalized"]
    return counts + AuditCounts(
        dropped=totals["dropped"],
        trained=totals["trained"],
        positive=totals["positive"],
        negative=totals["negative"],
        **sums,
    )


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
