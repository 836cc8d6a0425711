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

The figures above count only what the final responses hold: a failed attempt SAAR rolled back is in none of them.
The failed-call figures count over every failed-call token the policy generated, kept or rolled back
(cleaner.purify.failed_calls), so their denominator is the same for every mode over the same rollouts:

- `failed_call_reinforced_share`: trained with a positive advantage (the wrong sign: a failed call reinforced);
  `failed_call_penalized_share`: trained with a negative advantage (the right sign); `failed_call_untrained_share`:
  the rest (masked, rolled back, cut by the response length, or trained with advantage 0). The three add up to 1.
  Tokens are a failed turn's, its reasoning and its calls; the `failed_call_code_*` figures count only the calls.
- A negative sample (`save_negative_samples`) trains a rolled-back first attempt's call on its own row; its tokens
  count as that attempt's, with the sign of the negative row's advantage.
- `failed_call_rolled_back_share`: the share SAAR cut out of the responses.
- `failed_call_replacement_share`: what is trained in their place, per failed-call token generated: trained tokens
  SAAR spliced in where it cut a failed attempt (its shallow and deep splices, sampled off-policy);
  `failed_call_replacement_reinforced_share`: those of them with a positive advantage.
A mode that can never train a failed call's token (`error_turn_mask`, `error_trajectory_filter`) reports its
reinforced and penalized shares as removed (`removed_figures`), not as a measured 0.

A figure whose denominator is zero is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from cleaner.purify.config import Purification
from cleaner.purify.failed_calls import FailedCall
from cleaner.purify.turns import Turn

PREFIX = "purify/"

# Spliced-span kinds that put a retry where SAAR cut a failed attempt (an `exhausted` span is the kept attempt itself).
REPLACEMENT_KINDS = ("shallow", "deep")
# The failed-call figures a mode that never trains a failed call's token cannot measure.
SIGNAL_FIGURES = (
    "failed_call_reinforced_share",
    "failed_call_penalized_share",
    "failed_call_code_reinforced_share",
    "failed_call_code_penalized_share",
)
# Modes whose loss mask excludes every kept failed call (a rolled-back one is never in a response).
_MODES_WITHOUT_FAILED_CALLS = (Purification.ERROR_TURN_MASK, Purification.ERROR_TRAJECTORY_FILTER)


def removed_figures(mode: Purification) -> frozenset[str]:
    """The failed-call figures that are 0 by construction under `mode`: print them as removed, not as 0."""
    return frozenset(SIGNAL_FIGURES) if mode in _MODES_WITHOUT_FAILED_CALLS else frozenset()


@dataclass(frozen=True)
class AuditRow:
    turns: Sequence[Turn]
    mask: Sequence[int]  # the loss mask trained with (after the mode)
    advantages: Sequence[float] | float  # per response token, or one value for every token of the trajectory
    generated_tokens: int
    spliced_spans: Sequence[Sequence] = ()  # SAAR's [start, end, attempt, kind]
    failed_calls: Sequence[FailedCall] | None = None  # every failed call generated (None: not recorded)
    negative_sample: bool = False  # a negative sample's row: it trains a rolled-back attempt's call, nothing else


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
    # every failed call generated (cleaner.purify.failed_calls)
    failed_unrecorded: int = 0  # trajectories without a failed-call record (another agent loop, an old record)
    failed_calls: int = 0  # failed turns generated (a turn with parallel failed calls counts once)
    failed_tokens: int = 0
    failed_code_tokens: int = 0
    failed_rolled_back: int = 0  # tokens SAAR cut out
    failed_reinforced: int = 0
    failed_penalized: int = 0
    failed_code_reinforced: int = 0
    failed_code_penalized: int = 0
    replacement: int = 0  # trained tokens SAAR spliced in where it cut a failed attempt
    replacement_reinforced: int = 0

    def __add__(self, other: AuditCounts) -> AuditCounts:
        return AuditCounts(**{item.name: getattr(self, item.name) + getattr(other, item.name) for item in fields(self)})

    @property
    def failed_untrained(self) -> int:
        return self.failed_tokens - self.failed_reinforced - self.failed_penalized

    @property
    def failed_code_untrained(self) -> int:
        return self.failed_code_tokens - self.failed_code_reinforced - self.failed_code_penalized

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
            "failed_call_reinforced_share": (self.failed_reinforced, self.failed_tokens),
            "failed_call_penalized_share": (self.failed_penalized, self.failed_tokens),
            "failed_call_untrained_share": (self.failed_untrained, self.failed_tokens),
            "failed_call_code_reinforced_share": (self.failed_code_reinforced, self.failed_code_tokens),
            "failed_call_code_penalized_share": (self.failed_code_penalized, self.failed_code_tokens),
            "failed_call_code_untrained_share": (self.failed_code_untrained, self.failed_code_tokens),
            "failed_call_rolled_back_share": (self.failed_rolled_back, self.failed_tokens),
            "failed_call_replacement_share": (self.replacement, self.failed_tokens),
            "failed_call_replacement_reinforced_share": (self.replacement_reinforced, self.failed_tokens),
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


def _signs(mask: Sequence[int], advantages: Sequence[float], start: int, end: int) -> tuple[int, int]:
    """Trained tokens of `[start, end)` with a positive and with a negative advantage."""
    positive = negative = 0
    for index in range(max(start, 0), min(end, len(mask))):
        if mask[index]:
            positive += advantages[index] > 0
            negative += advantages[index] < 0
    return positive, negative


def _negative_sample_counts(mask: Sequence[int], advantages: Sequence[float]) -> AuditCounts:
    """A negative sample trains only its failed call (cleaner.saar.negatives): its trained tokens by sign."""
    positive, negative = _signs(mask, advantages, 0, len(mask))
    return AuditCounts(
        failed_reinforced=positive,
        failed_penalized=negative,
        failed_code_reinforced=positive,
        failed_code_penalized=negative,
    )


def _replacement_counts(mask: Sequence[int], advantages: Sequence[float], spliced_spans: Sequence) -> AuditCounts:
    """Trained tokens SAAR spliced in where it cut a failed attempt, and those of them with a positive advantage."""
    replacement = replacement_reinforced = 0
    for span in spliced_spans:
        if span[3] in REPLACEMENT_KINDS:
            start, end = int(span[0]), min(int(span[1]), len(mask))
            replacement += sum(mask[start:end])
            replacement_reinforced += _signs(mask, advantages, start, end)[0]
    return AuditCounts(replacement=replacement, replacement_reinforced=replacement_reinforced)


def _failed_call_counts(calls: Sequence[FailedCall] | None, mask: Sequence[int], advantages: Sequence[float]):
    if calls is None:
        return AuditCounts(failed_unrecorded=1)
    reinforced = penalized = code_reinforced = code_penalized = rolled_back = 0
    for call in calls:
        rolled_back += call.turn_tokens if call.fate == "rolled_back" else 0
        if not call.kept:
            continue
        positive, negative = _signs(mask, advantages, call.start, call.end)
        reinforced, penalized = reinforced + positive, penalized + negative
        if call.code_start is not None:
            positive, negative = _signs(mask, advantages, call.code_start, call.code_end)
            code_reinforced, code_penalized = code_reinforced + positive, code_penalized + negative
    return AuditCounts(
        failed_calls=len(calls),
        failed_tokens=sum(call.turn_tokens for call in calls),
        failed_code_tokens=sum(call.call_tokens for call in calls),
        failed_rolled_back=rolled_back,
        failed_reinforced=reinforced,
        failed_penalized=penalized,
        failed_code_reinforced=code_reinforced,
        failed_code_penalized=code_penalized,
    )


def audit_row(row: AuditRow) -> AuditCounts:
    """The definition: one row's counts, token by token (the trainer's batch version is cleaner.verl's
    purification_audit, tested equal to this)."""
    mask = [int(bool(value)) for value in row.mask]
    length = len(mask)
    advantages = [float(row.advantages)] * length if isinstance(row.advantages, int | float) else row.advantages
    if len(advantages) < length:
        raise ValueError(f"{len(advantages)} advantages for a response of {length} tokens")
    if row.negative_sample:
        return _negative_sample_counts(mask, advantages)
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
    counts = AuditCounts(
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
    failed = _failed_call_counts(row.failed_calls, mask, advantages)
    return counts + failed + _replacement_counts(mask, advantages, row.spliced_spans)


def audit_counts(rows: Sequence[AuditRow]) -> AuditCounts:
    total = AuditCounts()
    for row in rows:
        total = total + audit_row(row)
    return total


def counts_metrics(counts: AuditCounts, mode: Purification | None = None, prefix: str = PREFIX) -> dict[str, float]:
    """The figures of `counts` as metrics (`purify/<figure>`), with the trajectory and token counts. The failed-call
    shares `mode` cannot train are left out and `purify/failed_call_signal_removed` is 1 (0 where they are measured).
    """
    if counts.trajectories == 0:
        return {}
    removed = removed_figures(mode) if mode is not None else frozenset()
    metrics = {prefix + name: value for name, value in counts.figures().items() if name not in removed}
    metrics[prefix + "trajectories"] = float(counts.trajectories)
    metrics[prefix + "trained_tokens"] = float(counts.trained)
    metrics[prefix + "generated_tokens"] = float(counts.generated)
    metrics[prefix + "failed_call_tokens"] = float(counts.failed_tokens)
    metrics[prefix + "failed_calls"] = float(counts.failed_calls)
    metrics[prefix + "failed_call_unrecorded_trajectories"] = float(counts.failed_unrecorded)
    if mode is not None:
        metrics[prefix + "failed_call_signal_removed"] = float(bool(removed))
    return metrics


def audit_metrics(rows: Sequence[AuditRow], mode: Purification | None = None, prefix: str = PREFIX) -> dict[str, float]:
    """The audit figures of a batch as metrics (`counts_metrics`)."""
    return counts_metrics(audit_counts(rows), mode, prefix)


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
