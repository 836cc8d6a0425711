"""The audit over recorded trajectories (`cleaner rollout`'s JSONL records, no trainer): apply a mode to the
records' groups, give them verl's GRPO advantages, and count the audit figures (cleaner.purify.audit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cleaner.purify.audit import AuditCounts, AuditRow, audit_counts, grpo_advantages
from cleaner.purify.config import PurificationConfig
from cleaner.purify.masks import Trajectory, purified_masks
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY, turns_from_field

SPLICED_SPANS = "saar_spliced_spans"


@dataclass(frozen=True)
class RecordsAudit:
    counts: AuditCounts  # the audit figures' counts (`counts.figures()`)
    masks: list[list[int]]  # each record's mask under the mode
    advantages: list[float]  # each record's GRPO advantage over its group's trained records (0 if dropped)

    @property
    def kept(self) -> list[bool]:
        """Which records train anything under the mode."""
        return [any(mask) for mask in self.masks]


def audit_records(
    records: Sequence[Mapping[str, Any]],
    config: PurificationConfig,
    group_of: Callable[[Mapping[str, Any]], str] = lambda record: str(record["uid"]),
) -> RecordsAudit:
    """The audit of `records` trained under `config`'s mode, grouped by `group_of` (default: the record's `uid`;
    give SAAR-on and SAAR-off records of one problem different groups)."""
    groups = [group_of(record) for record in records]
    scores = [float(record["score"]) for record in records]
    turns = [turns_from_field(record[TURNS_KEY]) for record in records]
    batch = [
        Trajectory(group=group, score=score, turns=record_turns, mask=list(record["response_mask"]))
        for group, score, record_turns, record in zip(groups, scores, turns, records, strict=True)
    ]
    masks = purified_masks(config, batch)
    advantages = grpo_advantages(scores, groups, [any(mask) for mask in masks])
    rows = [
        AuditRow(
            turns=record_turns,
            mask=mask,
            advantages=advantage,
            generated_tokens=int(record[GENERATED_TOKENS_KEY]),
            spliced_spans=record.get(SPLICED_SPANS) or (),
        )
        for record_turns, mask, advantage, record in zip(turns, masks, advantages, records, strict=True)
    ]
    return RecordsAudit(counts=audit_counts(rows), masks=masks, advantages=advantages)
