"""The audit: how much of what a run trains reinforces failed tool calls, and what each mode spends.

One definition, used by the trainer's `purify/*` metrics, `cleaner rollout`'s summary and `cleaner report`. A row
is one trajectory as trained: its turns, the loss mask after purification, its advantages and what it cost to
generate. Figures (docs/purification.md):

- `reinforced_error_token_share`: of the trained tokens with positive advantage, the share in turns that kept a
  failed call, the whole turn (its reasoning and its code: the reasoning led to the failed call and is reinforced
  with it); `reinforced_error_code_token_share` counts only the calls' tokens.
- `penalized_success_token_share`: of the trained tokens with negative advantage, the share in turns whose calls
  all succeeded (the mirror error: a good call punished because the trajectory failed).
- `trained_token_share`: trained tokens / generated tokens.
- `dropped_trajectory_share`: trajectories with no trained token / trajectories.
- `generated_tokens_per_trained_token`: generated / trained; generated counts every sampled token, first attempts
  and resamples SAAR cut out included, and every rollout RoC cut.
- `offpolicy_token_share`: of the trained tokens, the share inside SAAR's spliced spans (sampled in a context that
  held an error the trained trajectory no longer has).
A figure whose denominator is zero is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cleaner.purify.turns import Turn

PREFIX = "purify/"


@dataclass(frozen=True)
class AuditRow:
    turns: Sequence[Turn]
    mask: Sequence[int]  # the loss mask trained with (after the mode)
    advantages: Sequence[float] | float  # per response token, or one value for every token of the trajectory
    generated_tokens: int
    spliced_spans: Sequence[Sequence] = ()  # SAAR's [start, end, attempt, kind]


@dataclass(frozen=True)
class AuditCounts:
    trajectories: int = 0
    dropped: int = 0
    generated: int = 0
    trained: int = 0
    positive: int = 0
    positive_on_failed_turn: int = 0
    positive_on_failed_code: int = 0
    negative: int = 0
    negative_on_successful_call: int = 0
    offpolicy: int = 0

    def figures(self) -> dict[str, float]:
        """The audit figures (without prefix), each only where its denominator is positive."""
        ratios = {
            "reinforced_error_token_share": (self.positive_on_failed_turn, self.positive),
            "reinforced_error_code_token_share": (self.positive_on_failed_code, self.positive),
            "penalized_success_token_share": (self.negative_on_successful_call, self.negative),
            "trained_token_share": (self.trained, self.generated),
            "dropped_trajectory_share": (self.dropped, self.trajectories),
            "generated_tokens_per_trained_token": (self.generated, self.trained),
            "offpolicy_token_share": (self.offpolicy, self.trained),
        }
        return {name: part / whole for name, (part, whole) in ratios.items() if whole > 0}


def _token_labels(length: int, turns: Sequence[Turn]) -> tuple[list[bool], list[bool], list[bool]]:
    """Per token: in a failed turn, in a failed turn's code, in a turn whose calls succeeded."""
    failed_turn, failed_code, succeeded = [False] * length, [False] * length, [False] * length
    for turn in turns:
        for index in range(turn.start, min(turn.end, length)):
            failed_turn[index] = turn.failed
            succeeded[index] = turn.call and not turn.failed
        if turn.failed and turn.code_start is not None:
            for index in range(turn.code_start, min(turn.code_end, length)):
                failed_code[index] = True
    return failed_turn, failed_code, succeeded


def audit_row(row: AuditRow) -> AuditCounts:
    mask = list(row.mask)
    length = len(mask)
    advantages = [float(row.advantages)] * length if isinstance(row.advantages, int | float) else row.advantages
    if len(advantages) < length:
        raise ValueError(f"{len(advantages)} advantages for a response of {length} tokens")
    failed_turn, failed_code, succeeded = _token_labels(length, row.turns)
    spliced = [False] * length
    for span in row.spliced_spans:
        for index in range(int(span[0]), min(int(span[1]), length)):
            spliced[index] = True
    trained = positive = on_failed_turn = on_failed_code = negative = on_success = offpolicy = 0
    for index, value in enumerate(mask):
        if not value:
            continue
        trained += 1
        offpolicy += spliced[index]
        advantage = advantages[index]
        if advantage > 0:
            positive += 1
            on_failed_turn += failed_turn[index]
            on_failed_code += failed_code[index]
        elif advantage < 0:
            negative += 1
            on_success += succeeded[index]
    return AuditCounts(
        trajectories=1,
        dropped=int(trained == 0),
        generated=int(row.generated_tokens),
        trained=trained,
        positive=positive,
        positive_on_failed_turn=on_failed_turn,
        positive_on_failed_code=on_failed_code,
        negative=negative,
        negative_on_successful_call=on_success,
        offpolicy=offpolicy,
    )


def audit_counts(rows: Sequence[AuditRow]) -> AuditCounts:
    total: dict[str, int] = {}
    for row in rows:
        for name, value in vars(audit_row(row)).items():
            total[name] = total.get(name, 0) + value
    return AuditCounts(**total)


def audit_metrics(rows: Sequence[AuditRow], prefix: str = PREFIX) -> dict[str, float]:
    """The audit figures of a batch as metrics (`purify/<figure>`), plus its trajectory and token counts."""
    if not rows:
        return {}
    counts = audit_counts(rows)
    metrics = {prefix + name: value for name, value in counts.figures().items()}
    metrics[prefix + "trajectories"] = float(counts.trajectories)
    metrics[prefix + "trained_tokens"] = float(counts.trained)
    metrics[prefix + "generated_tokens"] = float(counts.generated)
    return metrics


def grpo_advantages(scores: Sequence[float], groups: Sequence[str], trained: Sequence[bool]) -> list[float]:
    """The trainer's GRPO outcome advantage per trajectory, for recorded trajectories (no trainer): (score - group
    mean) / (group std + 1e-6), std with Bessel's correction, over the trajectories that train; a trajectory that
    trains nothing gets 0, and so does the one trained row left of a larger group (no baseline left); a group of
    one from the start keeps verl's single-sample rule, mean 0 and std 1 (cleaner.verl.group_statistics)."""
    members: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    for row, (group, is_trained) in enumerate(zip(groups, trained, strict=True)):
        sizes[group] = sizes.get(group, 0) + 1
        if is_trained:
            members.setdefault(group, []).append(row)
    advantages = [0.0] * len(scores)
    for group, rows in members.items():
        values = [float(scores[row]) for row in rows]
        if len(values) == 1 and sizes[group] > 1:
            continue
        if len(values) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(values) / len(values)
            std = (sum((value - mean) ** 2 for value in values) / (len(values) - 1)) ** 0.5
        for row, value in zip(rows, values, strict=True):
            advantages[row] = (value - mean) / (std + 1e-6)
    return advantages
