"""The audit over recorded trajectories (`cleaner rollout`'s JSONL records, no trainer): apply a mode to the
records' groups, give them verl's GRPO advantages, and count the audit figures (cleaner.purify.audit).

GRPO's advantage is a trajectory's reward against its group's: with one sample per prompt there is no group, so
the audit refuses records whose groups hold a single trajectory (`SingleSampleGroupsError`).

The negative-sample setting (SAAR with `save_negative_samples`, the tool-DPO ablation) is a row of SAAR-on records
with `negative_limit`: each trajectory's first `negative_limit` negative candidates (the rolled-back first attempts
of the positions SAAR purified, cleaner.purify.failed_calls) are trained as negative samples, their call's tokens
with a negative advantage (the DPO adjustment `algorithm.use_dpo_on_tool_calls` gives them; without it their
advantage is 0 and they train nothing).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cleaner.purify.audit import AuditCounts, AuditRow, audit_counts, grpo_advantages
from cleaner.purify.config import PurificationConfig
from cleaner.purify.failed_calls import FAILED_CALLS_KEY, FailedCall, failed_calls_from_field
from cleaner.purify.masks import Trajectory, purified_masks
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY, turns_from_field

SPLICED_SPANS = "saar_spliced_spans"
# The advantage a negative sample's call is counted with: only its sign enters the audit.
NEGATIVE_ADVANTAGE = -1.0


class SingleSampleGroupsError(ValueError):
    """The records hold groups of one trajectory: no GRPO group, no advantage to audit."""


@dataclass(frozen=True)
class RecordsAudit:
    counts: AuditCounts  # the audit figures' counts (`counts.figures()`)
    masks: list[list[int]]  # each record's mask under the mode
    advantages: list[float]  # each record's GRPO advantage over its group's trained records (0 if dropped)

    @property
    def kept(self) -> list[bool]:
        """Which records train anything under the mode."""
        return [any(mask) for mask in self.masks]


def require_groups(groups: Sequence[str]) -> None:
    """Raise `SingleSampleGroupsError` unless every group holds at least two trajectories."""
    sizes = Counter(groups)
    single = sorted(group for group, size in sizes.items() if size < 2)
    if single:
        raise SingleSampleGroupsError(
            f"{len(single)} of {len(sizes)} groups hold one trajectory (e.g. {single[0]!r}): the audit compares each "
            "trajectory with its GRPO group and needs at least 2 samples per prompt; roll out again with "
            "`cleaner rollout -n 4` (or any n >= 2)"
        )


def negative_rows(calls: Sequence[FailedCall], limit: int) -> list[AuditRow]:
    """The negative samples `save_negative_samples` with `max_negative_samples_per_group: limit` trains from one
    trajectory's failed calls: its first `limit` candidates, each its call's tokens with a negative advantage."""
    candidates = [call for call in calls if call.negative_candidate][:limit]
    return [
        AuditRow(turns=(), mask=[1] * call.call_tokens, advantages=NEGATIVE_ADVANTAGE, generated_tokens=0,
                 negative_sample=True)
        for call in candidates
    ]  # fmt: skip


def audit_records(
    records: Sequence[Mapping[str, Any]],
    config: PurificationConfig,
    group_of: Callable[[Mapping[str, Any]], str] = lambda record: str(record["uid"]),
    negative_limit: int | None = None,
) -> RecordsAudit:
    """The audit of `records` trained under `config`'s mode, grouped by `group_of` (default: the record's `uid`;
    give SAAR-on and SAAR-off records of one problem different groups). With `negative_limit` (SAAR-on records),
    the rolled-back attempts are trained as negative samples, at most that many per trajectory."""
    groups = [group_of(record) for record in records]
    require_groups(groups)
    if negative_limit is not None and negative_limit < 1:
        raise ValueError(f"negative_limit must be at least 1, got {negative_limit}")
    scores = [float(record["score"]) for record in records]
    turns = [turns_from_field(record[TURNS_KEY]) for record in records]
    batch = [
        Trajectory(group=group, score=score, turns=record_turns, mask=list(record["response_mask"]))
        for group, score, record_turns, record in zip(groups, scores, turns, records, strict=True)
    ]
    masks = purified_masks(config, batch)
    advantages = grpo_advantages(scores, groups, [any(mask) for mask in masks])
    rows = []
    for record_turns, mask, advantage, record in zip(turns, masks, advantages, records, strict=True):
        calls = failed_calls_from_field(record[FAILED_CALLS_KEY]) if FAILED_CALLS_KEY in record else None
        rows.append(
            AuditRow(
                turns=record_turns,
                mask=mask,
                advantages=advantage,
                generated_tokens=int(record[GENERATED_TOKENS_KEY]),
                spliced_spans=record.get(SPLICED_SPANS) or (),
                failed_calls=calls,
            )
        )
        if negative_limit is not None and calls is not None:
            rows += negative_rows(calls, negative_limit)
    return RecordsAudit(counts=audit_counts(rows), masks=masks, advantages=advantages)
