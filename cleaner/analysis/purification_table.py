"""Every purification mode applied to the same recorded groups: the comparison table of `cleaner rollout`,
`cleaner report` and `benchmarks/purification.py`.

A prompt's samples are its GRPO group. `saar` reads the SAAR-on records (SAAR acts while sampling); every
other mode reads the SAAR-off records of the same problems and seeds and applies its mask or filter to them.
Per group, `cleaner.purify.records.audit_records` applies the mode's masks, verl's GRPO outcome advantages over
the trajectories that still train and the audit counts (the trainer's own definitions); this module only sums
them per prompt and puts a 95 % bootstrap interval over prompts on each ratio (`cleaner.analysis.bootstrap`).

RoC keeps `len(group) // roc_oversampling` rollouts of each group (rStar2-Agent's 2, so 2 of 4, `TABLE_ROC`):
its "generated tokens per trained token" carries the rollouts it cut, and its kept groups are half the size of
the others'. Pure: records in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cleaner.purify.audit import AuditCounts
from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.records import SingleSampleGroupsError, audit_records, require_groups
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY
from cleaner.trajectory.summary import is_correct

from .bootstrap import DEFAULT_RESAMPLES, Estimate, Tally, estimate, resample_plan

Record = Mapping[str, Any]

# RoC as rStar2-Agent's training script runs it: 2x oversampling, and a floor on each side of the kept group (its
# script keeps at least 2 correct and 2 incorrect of 16; here at least 1 of each). Without the floor a group of 4
# with one correct rollout keeps round(1 x 2 / 4) = 0 correct ones and trains on nothing but failures.
TABLE_ROC = PurificationConfig(
    purification=Purification.ROC, roc_oversampling=2, roc_min_correct=1, roc_min_incorrect=1
)

# Table order: the baseline, CLEANER, then the alternatives.
MODES: tuple[Purification, ...] = (
    Purification.NONE,
    Purification.SAAR,
    Purification.ERROR_TURN_MASK,
    Purification.VOID_TURN_FILTER,
    Purification.ERROR_TRAJECTORY_FILTER,
    Purification.ROC,
)


@dataclass(frozen=True)
class Figure:
    """One column: a ratio of two per-prompt sums, and what its denominator counts."""

    name: str
    label: str
    numerator: str  # an AuditCounts field, or "kept_correct"
    denominator: str  # an AuditCounts field, or "kept"
    unit: str  # what the sample size counts
    percent: bool = True


FIGURES: tuple[Figure, ...] = (
    Figure(
        "reinforced_error_token_share",
        "reinforced-error tokens (of positive-advantage tokens)",
        "positive_on_failed_turn",
        "positive",
        "tokens",
    ),
    Figure(
        "penalized_success_token_share",
        "penalized-success tokens (of negative-advantage tokens)",
        "negative_on_successful_call",
        "negative",
        "tokens",
    ),
    Figure("trained_token_share", "trained tokens (of generated)", "trained", "generated", "tokens"),
    Figure("dropped_trajectory_share", "dropped trajectories", "dropped", "trajectories", "trajectories"),
    Figure(
        "generated_tokens_per_trained_token",
        "generated per trained token",
        "generated",
        "trained",
        "tokens",
        percent=False,
    ),
    Figure("offpolicy_token_share", "off-policy tokens (of trained)", "offpolicy", "trained", "tokens"),
    Figure("kept_accuracy", "accuracy of kept rollouts", "kept_correct", "kept", "trajectories"),
)


class PurificationTableError(ValueError):
    """The records cannot give the comparison (no per-turn record, or no groups to compare)."""


def has_turns(record: Record) -> bool:
    """The record carries the per-turn record the modes need (`cleaner rollout` output with purify fields)."""
    return record.get(TURNS_KEY) is not None and record.get(GENERATED_TOKENS_KEY) is not None


@dataclass(frozen=True)
class PromptCounts:
    """One prompt's group under one mode: the audit counts, and how many kept rollouts are correct."""

    audit: AuditCounts
    kept: int
    kept_correct: int

    def value(self, field: str) -> float:
        if field == "kept":
            return float(self.kept)
        if field == "kept_correct":
            return float(self.kept_correct)
        return float(getattr(self.audit, field))


def group_counts(config: PurificationConfig, group: Sequence[Record]) -> PromptCounts:
    """Apply `config`'s mode to one prompt's records and audit the result as the trainer would."""
    audit = audit_records(group, config, group_of=lambda record: str(record["problem_id"]))
    kept_correct = sum(1 for keep, record in zip(audit.kept, group, strict=True) if keep and is_correct(record))
    return PromptCounts(audit.counts, kept=sum(audit.kept), kept_correct=kept_correct)


@dataclass(frozen=True)
class ModeRow:
    mode: Purification
    trajectories: int
    prompts: int
    estimates: dict[str, Estimate]  # Figure.name -> estimate


@dataclass(frozen=True)
class PurificationTable:
    rows: list[ModeRow]
    group_size: int  # samples per prompt (the largest group)
    roc_kept: int  # rollouts RoC keeps per group
    generated_per_prompt: dict[bool, float]  # SAAR on/off: mean generated tokens per prompt (the budget)
    resamples: int
    skipped: list[str]  # what was left out (modes, prompts with incomplete groups) and why


def _groups(records: Sequence[Record], saar: bool) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for record in records:
        if bool(record["saar"]) == saar:
            groups.setdefault(str(record["problem_id"]), []).append(record)
    for group in groups.values():
        group.sort(key=lambda record: int(record["sample"]))
    return groups


def purification_table(
    records: Sequence[Record],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    roc: PurificationConfig | None = None,
) -> PurificationTable:
    """The comparison over `records` (SAAR-on and/or SAAR-off `cleaner rollout` records with the per-turn record).

    Only prompts sampled in both modes count when both are there, so every row covers the same prompts.
    """
    roc = roc or TABLE_ROC
    missing = [str(record.get("key")) for record in records if not has_turns(record)]
    if missing:
        raise PurificationTableError(
            f"{len(missing)} record(s) lack the per-turn record ({TURNS_KEY}), e.g. {missing[0]}: roll out again"
        )
    try:  # one sample per prompt is no GRPO group: say how to get groups instead of auditing groups of one
        require_groups([f"{record['problem_id']}#{'saar' if record['saar'] else 'nosaar'}" for record in records])
    except SingleSampleGroupsError as error:
        raise PurificationTableError(str(error)) from error
    by_mode = {saar: _groups(records, saar) for saar in (True, False)}
    present = [saar for saar in (True, False) if by_mode[saar]]
    if not present:
        raise PurificationTableError("no records")
    sampled = sorted(set.intersection(*(set(by_mode[saar]) for saar in present)))
    if not sampled:
        raise PurificationTableError("no prompt was sampled with SAAR both on and off")
    # A prompt with fewer samples than the others (an interrupted rollout) would be a smaller GRPO group.
    group_size = max(len(by_mode[saar][p]) for saar in present for p in sampled)
    prompts = [p for p in sampled if all(len(by_mode[saar][p]) == group_size for saar in present)]
    incomplete = len(set().union(*(by_mode[saar] for saar in present))) - len(prompts)
    if not prompts:
        raise PurificationTableError(f"no prompt has {group_size} samples in every SAAR mode")
    plan = resample_plan(len(prompts), resamples, seed)
    rows = []
    skipped = [f"{incomplete} prompt(s) without {group_size} samples in every SAAR mode"] if incomplete else []
    for mode in MODES:
        saar = mode is Purification.SAAR
        if saar not in present:
            skipped.append(f"{mode.value}: no SAAR-{'on' if saar else 'off'} records")
            continue
        config = roc if mode is Purification.ROC else PurificationConfig(purification=mode)
        if mode is Purification.ROC:
            problems = config.roc_problems(group_size)
            if problems:
                skipped.append(f"{mode.value}: {problems[0]}")
                continue
        counts = [group_counts(config, by_mode[saar][prompt]) for prompt in prompts]
        estimates = {
            figure.name: estimate([Tally(c.value(figure.numerator), c.value(figure.denominator)) for c in counts], plan)
            for figure in FIGURES
        }
        trajectories = sum(len(by_mode[saar][prompt]) for prompt in prompts)
        rows.append(ModeRow(mode, trajectories, len(prompts), estimates))
    generated = {
        saar: sum(int(r[GENERATED_TOKENS_KEY]) for p in prompts for r in by_mode[saar][p]) / len(prompts)
        for saar in present
    }
    return PurificationTable(rows, group_size, roc.kept_group_size(group_size), generated, resamples, skipped)


def _format(value: float | None, percent: bool) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1%}" if percent else f"{value:.2f}"


def format_estimate(value: Estimate, figure: Figure, separator: str = " ") -> str:
    """`12.3% [8.1%, 17.0%] (n = 1234)`: the point, the 95 % interval if any, the sample size."""
    parts = [_format(value.value, figure.percent)]
    if value.low is not None and value.high is not None:
        parts.append(f"[{_format(value.low, figure.percent)}, {_format(value.high, figure.percent)}]")
    parts.append(f"(n = {value.size:.0f})")
    return separator.join(parts)


def table_notes(table: PurificationTable) -> list[str]:
    """What the reader needs to read the table: groups, intervals, RoC's budget."""
    notes = [
        f"{table.rows[0].prompts if table.rows else 0} prompt(s), {table.group_size} samples per prompt and SAAR mode; "
        "`saar` is the SAAR-on groups as sampled, every other mode the SAAR-off groups of the same problems and "
        "seeds with its rule applied. Advantages: GRPO over each group's trajectories that still train.",
        f"Intervals: 95 % percentile bootstrap over prompts ({table.resamples} draws, the same draws for every "
        "cell); n is the ratio's denominator (tokens or trajectories). No interval below 4 prompts.",
        "Reinforced-error tokens: positive-advantage trained tokens in turns that kept a failed call (reasoning and "
        "code); penalized-success tokens: negative-advantage trained tokens in turns whose calls succeeded.",
    ]
    if any(row.mode is Purification.ROC for row in table.rows):
        budget = ", ".join(
            f"SAAR {'on' if saar else 'off'} {tokens:.0f}"
            for saar, tokens in sorted(table.generated_per_prompt.items())
        )
        notes.append(
            f"Budget: every mode samples the same {table.group_size} rollouts per prompt; RoC trains "
            f"{table.roc_kept} of them (rStar2-Agent's oversampling 2, at least one correct and one incorrect when "
            "the group has them), so its groups are half the size and what it cut counts in its generated tokens per "
            f"trained token. Generated tokens per prompt: {budget}."
        )
    notes += [f"Not shown: {reason}." for reason in table.skipped]
    return notes


def purification_markdown(table: PurificationTable) -> str:
    head = "| mode | trajectories | " + " | ".join(figure.label for figure in FIGURES) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(FIGURES)]
    for row in table.rows:
        cells = [format_estimate(row.estimates[figure.name], figure) for figure in FIGURES]
        lines.append(f"| `{row.mode.value}` | {row.trajectories} | " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + [f"- {note}" for note in table_notes(table)])


def render_purification_table(table: PurificationTable, title: str = "purification modes on the same groups"):
    """The table for a terminal: one column per mode, each cell the value, its interval and n on three lines."""
    from rich.table import Table

    terminal = Table(title=title, show_lines=True)
    terminal.add_column("figure")
    for row in table.rows:
        terminal.add_column(row.mode.value, justify="right")
    terminal.add_row("trajectories", *(str(row.trajectories) for row in table.rows))
    for figure in FIGURES:
        terminal.add_row(
            figure.label, *(format_estimate(row.estimates[figure.name], figure, "\n") for row in table.rows)
        )
    terminal.caption = "\n".join(note.replace("`", "") for note in table_notes(table))
    return terminal
