"""Every purification mode applied to the same recorded groups: the comparison table of `cleaner rollout`,
`cleaner report` and `benchmarks/purification.py`.

A prompt's samples are its GRPO group. `saar` and the negative-sample setting read the SAAR-on records (SAAR acts
while sampling); every other mode reads the SAAR-off records of the same problems and seeds and applies its mask
or filter to them. Per group, `cleaner.purify.records.audit_records` applies the mode's masks, verl's GRPO outcome
advantages over the trajectories that still train and the audit counts (the trainer's own definitions, including
the failed-call figures over every failed call generated, rolled back or kept); this module only sums them per
prompt and puts a 95 % bootstrap interval over prompts on each ratio (`cleaner.analysis.bootstrap`).

Budget: `none`, the masks and the filters train the first `n` SAAR-off samples of a prompt, `n` the SAAR-on group
size, so they pair with SAAR's. RoC samples more rollouts per prompt than it trains (rStar2-Agent's oversampling 2):
it takes the first `m` SAAR-off samples, `m` a group size RoC can halve whose generated tokens per prompt come
closest to SAAR's (`roc_samples`), and says whether they are within ±10 %.

A cell a mode makes zero by construction (a failed call's tokens that its mask or filter removes) reads "removed",
not 0 %. Per problem family (`families`: problem id -> label), the sampled tool-error rate and the reinforced
shares without purification. Pure: records in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cleaner.purify.audit import AuditCounts, removed_figures
from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.records import SingleSampleGroupsError, audit_records, require_groups
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY
from cleaner.saar.stats import PREFIX
from cleaner.trajectory.summary import is_correct

from .bootstrap import DEFAULT_RESAMPLES, Estimate, Tally, estimate, resample_plan

Record = Mapping[str, Any]

# RoC as rStar2-Agent's training script runs it: 2x oversampling, and a floor on each side of the kept group (its
# script keeps at least 2 correct and 2 incorrect of 16; here at least 1 of each). Without the floor a group of 4
# with one correct rollout keeps round(1 x 2 / 4) = 0 correct ones and trains on nothing but failures.
TABLE_ROC = PurificationConfig(
    purification=Purification.ROC, roc_oversampling=2, roc_min_correct=1, roc_min_incorrect=1
)
# RoC's generated tokens per prompt count as matched to SAAR's within this relative distance.
TOKEN_MATCH_TOLERANCE = 0.10
# `max_negative_samples_per_group`'s default: negatives kept per trajectory in the negative-sample setting.
NEGATIVES_PER_TRAJECTORY = 1
REMOVED = "removed"
# How `make demo` and `cleaner rollout` get groups (the table's error says so when a run has one sample per prompt).
HOW_TO_GET_GROUPS = (
    'the table needs at least 2 samples per prompt and SAAR mode (a GRPO group): `make demo DEMO_ARGS="-n 4"`, '
    "`cleaner rollout -n 4`, or `python benchmarks/purification.py`"
)


@dataclass(frozen=True)
class Setting:
    """One row: a mode's rule on the SAAR-on or SAAR-off records."""

    name: str
    mode: Purification
    saar: bool  # which records it trains
    negative_limit: int | None = None  # rolled-back attempts trained as negative samples, per trajectory

    @property
    def removed(self) -> frozenset[str]:
        """Figures this setting makes zero by construction: its rule removes every failed call's token (the
        audit's failed-call figures, and the reinforced-error share, whose failed turns the same rule removes)."""
        removed = removed_figures(self.mode)
        return removed | {"reinforced_error_token_share"} if removed else removed


# Table order: the baseline, CLEANER and its negative-sample ablation, then the alternatives.
SETTINGS: tuple[Setting, ...] = (
    Setting("none", Purification.NONE, saar=False),
    Setting("saar", Purification.SAAR, saar=True),
    Setting("saar_negative_samples", Purification.SAAR, saar=True, negative_limit=NEGATIVES_PER_TRAJECTORY),
    Setting("error_turn_mask", Purification.ERROR_TURN_MASK, saar=False),
    Setting("void_turn_filter", Purification.VOID_TURN_FILTER, saar=False),
    Setting("error_trajectory_filter", Purification.ERROR_TRAJECTORY_FILTER, saar=False),
    Setting("roc", Purification.ROC, saar=False),
)


@dataclass(frozen=True)
class Figure:
    """One column: a ratio of two per-prompt sums, and what its denominator counts."""

    name: str
    label: str
    numerator: str  # an AuditCounts field or property, or one of PromptCounts' own ("kept_correct", ...)
    denominator: str
    unit: str  # what the sample size counts
    style: str = "percent"  # percent / ratio / count


BUDGET = Figure("generated_tokens_per_prompt", "generated tokens per prompt", "generated", "prompt", "prompts", "count")
# What each mode does with every failed-call token the policy generated (kept in a response or rolled back).
FAILED_CALL_FIGURES: tuple[Figure, ...] = (
    Figure("failed_call_reinforced_share", "reinforced", "failed_reinforced", "failed_tokens", "failed-call tokens"),
    Figure("failed_call_penalized_share", "penalized", "failed_penalized", "failed_tokens", "failed-call tokens"),
    Figure("failed_call_untrained_share", "not trained", "failed_untrained", "failed_tokens", "failed-call tokens"),
    Figure(
        "failed_call_replacement_share",
        "trained in their place (SAAR's splices)",
        "replacement",
        "failed_tokens",
        "failed-call tokens",
    ),
)
# What each mode trains, over the final responses.
TRAINING_FIGURES: tuple[Figure, ...] = (
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
        "generated_tokens_per_trained_token", "generated per trained token", "generated", "trained", "tokens", "ratio"
    ),
    Figure("offpolicy_token_share", "off-policy tokens (of trained)", "offpolicy", "trained", "tokens"),
    Figure("kept_accuracy", "accuracy of kept rollouts", "kept_correct", "kept", "trajectories"),
)
FIGURES: tuple[Figure, ...] = (BUDGET, *FAILED_CALL_FIGURES, *TRAINING_FIGURES)
# Per family, over the SAAR-off samples the modes train (what sampling produces without purification).
FAMILY_FIGURES: tuple[Figure, ...] = (
    Figure("tool_error_rate", "sampled tool-error rate (of calls)", "failed_call_count", "tool_calls", "calls"),
    Figure(
        "failing_trajectory_share",
        "trajectories with a failed call",
        "failing_trajectories",
        "trajectories",
        "trajectories",
    ),
    TRAINING_FIGURES[0],
    Figure(
        "failed_call_reinforced_share",
        "failed-call tokens reinforced",
        "failed_reinforced",
        "failed_tokens",
        "failed-call tokens",
    ),
)


class PurificationTableError(ValueError):
    """The records cannot give the comparison (no per-turn record, groups of one, or no groups to compare)."""


def has_turns(record: Record) -> bool:
    """The record carries the per-turn record the modes need (`cleaner rollout` output with purify fields)."""
    return record.get(TURNS_KEY) is not None and record.get(GENERATED_TOKENS_KEY) is not None


def failed_call_count(record: Record) -> int:
    """Calls that failed with a model error in a trajectory, rolled back or kept (one turn may hold several)."""
    return sum(len(call["categories"]) for call in record[FAILED_CALLS_KEY])


@dataclass(frozen=True)
class PromptCounts:
    """One prompt's group under one setting: the audit counts, how many kept rollouts are correct, and what
    the family figures count."""

    audit: AuditCounts
    kept: int
    kept_correct: int
    tool_calls: int
    failed_call_count: int
    failing_trajectories: int

    def value(self, field: str) -> float:
        if field == "prompt":
            return 1.0
        if field in ("kept", "kept_correct", "tool_calls", "failed_call_count", "failing_trajectories"):
            return float(getattr(self, field))
        return float(getattr(self.audit, field))


def group_counts(setting: Setting, config: PurificationConfig, group: Sequence[Record]) -> PromptCounts:
    """Apply `setting`'s mode to one prompt's records and audit the result as the trainer would."""
    audit = audit_records(
        group, config, group_of=lambda record: str(record["problem_id"]), negative_limit=setting.negative_limit
    )
    return PromptCounts(
        audit.counts,
        kept=sum(audit.kept),
        kept_correct=sum(1 for keep, record in zip(audit.kept, group, strict=True) if keep and is_correct(record)),
        tool_calls=sum(int(record[PREFIX + "tool_calls"]) for record in group),
        failed_call_count=sum(failed_call_count(record) for record in group),
        failing_trajectories=sum(1 for record in group if record[FAILED_CALLS_KEY]),
    )


@dataclass(frozen=True)
class SettingRow:
    setting: Setting
    sampled: int  # rollouts sampled per prompt
    trained: int  # rollouts per prompt that form the GRPO group (RoC: the kept ones)
    trajectories: int
    prompts: int
    estimates: dict[str, Estimate]  # Figure.name -> estimate

    def cell(self, figure: Figure) -> str:
        """The figure's cell: "removed" where the setting's rule makes it zero, else the estimate."""
        value = self.estimates[figure.name]
        if figure.name in self.setting.removed:
            if value.value:  # the rule should have left nothing: a contradiction, not a figure
                raise PurificationTableError(f"{self.setting.name} removes {figure.name} but measures {value.value}")
            return REMOVED
        return format_estimate(value, figure)


@dataclass(frozen=True)
class FamilyRow:
    family: str
    prompts: int
    trajectories: int
    estimates: dict[str, Estimate]


@dataclass(frozen=True)
class PurificationTable:
    rows: list[SettingRow]
    families: list[FamilyRow]
    group_size: int  # samples per prompt that SAAR and the SAAR-off modes train
    roc_samples: int | None  # rollouts per prompt RoC samples (None: no RoC row)
    roc_kept: int | None  # and keeps
    roc_matched: bool | None  # RoC's generated tokens per prompt within ±10 % of SAAR's (None: nothing to match)
    generated_per_prompt: dict[str, float]  # setting name -> mean generated tokens per prompt (the budget)
    resamples: int
    skipped: list[str]  # what was left out (settings, prompts with incomplete groups) and why


def _groups(records: Sequence[Record], saar: bool) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for record in records:
        if bool(record["saar"]) == saar:
            groups.setdefault(str(record["problem_id"]), []).append(record)
    for group in groups.values():
        group.sort(key=lambda record: int(record["sample"]))
    return groups


def _check(records: Sequence[Record]) -> None:
    for key, what in ((TURNS_KEY, "the per-turn record"), (FAILED_CALLS_KEY, "the failed-call record")):
        missing = [str(record.get("key")) for record in records if record.get(key) is None]
        if missing:
            raise PurificationTableError(
                f"{len(missing)} record(s) lack {what} ({key}), e.g. {missing[0]}: roll out again"
            )
    try:  # one sample per prompt is no GRPO group: say how to get groups instead of auditing groups of one
        require_groups([f"{record['problem_id']}#{'saar' if record['saar'] else 'nosaar'}" for record in records])
    except SingleSampleGroupsError as error:
        raise PurificationTableError(f"{HOW_TO_GET_GROUPS} ({error})") from error


def _generated(group: Sequence[Record]) -> int:
    return sum(int(record[GENERATED_TOKENS_KEY]) for record in group)


def roc_samples(
    off: Mapping[str, list[Record]], prompts: Sequence[str], target: float | None, roc: PurificationConfig
) -> tuple[int | None, PurificationConfig, bool | None]:
    """How many SAAR-off samples per prompt RoC samples, and the oversampling it cuts them with: among the group
    sizes (up to the samples there are) and oversamplings (`roc`'s, or one more) that rStar2-Agent's rule can cut,
    the pair whose generated tokens per prompt come closest to `target` (SAAR's; the largest size at `roc`'s
    oversampling when there is nothing to match), and whether they are within ±10 % of it. One more oversampling
    is tried because rStar2-Agent's rounded shares cannot halve every size (6 into 3 fails its own assertion)."""
    available = min(len(off[prompt]) for prompt in prompts)
    candidates = [
        (size, replace(roc, roc_oversampling=ratio))
        for ratio in (roc.roc_oversampling, roc.roc_oversampling + 1)
        for size in range(2, available + 1)
        if not replace(roc, roc_oversampling=ratio).roc_problems(size)
    ]
    if not candidates:
        return None, roc, None
    if target is None:
        return max(size for size, config in candidates if config == roc), roc, None

    def tokens(size: int) -> float:
        return sum(_generated(off[prompt][:size]) for prompt in prompts) / len(prompts)

    size, config = min(
        candidates,
        key=lambda pair: (abs(tokens(pair[0]) - target), pair[1].roc_oversampling, -pair[0]),
    )
    return size, config, abs(tokens(size) - target) <= TOKEN_MATCH_TOLERANCE * target


def _estimates(counts: Sequence[PromptCounts], figures: Sequence[Figure], plan) -> dict[str, Estimate]:
    return {
        figure.name: estimate([Tally(c.value(figure.numerator), c.value(figure.denominator)) for c in counts], plan)
        for figure in figures
    }


def purification_table(
    records: Sequence[Record],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    roc: PurificationConfig | None = None,
    families: Mapping[str, str] | None = None,
) -> PurificationTable:
    """The comparison over `records` (SAAR-on and/or SAAR-off `cleaner rollout` records with the per-turn and
    failed-call records), per family of `families` (problem id -> family) when given.

    Only prompts sampled in both modes count when both are there, so every row covers the same prompts.
    """
    roc = roc or TABLE_ROC
    if not records:
        raise PurificationTableError("no records")
    _check(records)
    by_mode = {saar: _groups(records, saar) for saar in (True, False)}
    present = [saar for saar in (True, False) if by_mode[saar]]
    sampled = sorted(set.intersection(*(set(by_mode[saar]) for saar in present)))
    if not sampled:
        raise PurificationTableError("no prompt was sampled with SAAR both on and off")
    # A prompt with fewer samples than the others (an interrupted rollout) would be a smaller GRPO group.
    full = {saar: max(len(by_mode[saar][p]) for p in sampled) for saar in present}
    prompts = [p for p in sampled if all(len(by_mode[saar][p]) == full[saar] for saar in present)]
    incomplete = len(set().union(*(by_mode[saar] for saar in present))) - len(prompts)
    if not prompts:
        raise PurificationTableError(f"no prompt has {full} samples in every SAAR mode")
    group_size = full[True] if True in present else full[False]
    if False in present and full[False] < group_size:
        raise PurificationTableError(f"SAAR off has {full[False]} samples per prompt, SAAR on {group_size}")
    plan = resample_plan(len(prompts), resamples, seed)
    skipped = [f"{incomplete} prompt(s) without complete groups in every SAAR mode"] if incomplete else []
    saar_tokens = sum(_generated(by_mode[True][p]) for p in prompts) / len(prompts) if True in present else None
    roc_size, roc_matched = (None, None)
    if False in present:
        roc_size, roc, roc_matched = roc_samples(by_mode[False], prompts, saar_tokens, roc)
    rows = []
    for setting in SETTINGS:
        if setting.saar not in present:
            skipped.append(f"{setting.name}: no SAAR-{'on' if setting.saar else 'off'} records")
            continue
        size, config = group_size, PurificationConfig(purification=setting.mode)
        if setting.mode is Purification.ROC:
            if roc_size is None:
                skipped.append(f"roc: {roc.roc_problems(full[False])[0]}")
                continue
            size, config = roc_size, roc
        groups = [by_mode[setting.saar][prompt][:size] for prompt in prompts]
        counts = [group_counts(setting, config, group) for group in groups]
        trained = roc.kept_group_size(size) if setting.mode is Purification.ROC else size
        rows.append(
            SettingRow(setting, size, trained, size * len(prompts), len(prompts), _estimates(counts, FIGURES, plan))
        )
    family_rows = []
    if families is not None and False in present:
        unlabelled = sorted(set(prompts) - set(families))
        if unlabelled:
            raise PurificationTableError(f"{len(unlabelled)} prompt(s) have no family, e.g. {unlabelled[0]}")
        for family in sorted({families[p] for p in prompts}):
            members = [p for p in prompts if families[p] == family]
            counts = [group_counts(SETTINGS[0], PurificationConfig(), by_mode[False][p][:group_size]) for p in members]
            estimates = _estimates(counts, FAMILY_FIGURES, resample_plan(len(members), resamples, seed))
            family_rows.append(FamilyRow(family, len(members), len(members) * group_size, estimates))
    return PurificationTable(
        rows,
        family_rows,
        group_size,
        roc_size,
        roc.kept_group_size(roc_size) if roc_size is not None else None,
        roc_matched,
        {row.setting.name: row.estimates[BUDGET.name].value or 0.0 for row in rows},
        resamples,
        skipped,
    )


def _format(value: float | None, style: str) -> str:
    if value is None:
        return "n/a"
    if style == "percent":
        return f"{value:.1%}"
    return f"{value:.0f}" if style == "count" else f"{value:.2f}"


def format_estimate(value: Estimate, figure: Figure, separator: str = " ") -> str:
    """`12.3% [8.1%, 17.0%] (n = 1234)`: the point, the 95 % interval if any, the sample size."""
    parts = [_format(value.value, figure.style)]
    if value.low is not None and value.high is not None:
        parts.append(f"[{_format(value.low, figure.style)}, {_format(value.high, figure.style)}]")
    parts.append(f"(n = {value.size:.0f})")
    return separator.join(parts)


def rollouts_cell(row: SettingRow) -> str:
    return str(row.sampled) if row.sampled == row.trained else f"{row.sampled} (trains {row.trained})"


@dataclass(frozen=True)
class Section:
    """One table of the comparison: a title, its header and its rows of cells."""

    title: str
    head: list[str]
    rows: list[list[str]]


def sections(table: PurificationTable) -> list[Section]:
    """The comparison as tables of text cells: what each mode does with the failed calls, what it trains, and
    the families (what `purification_markdown` and the report print)."""
    failed = Section(
        "Every failed-call token generated (kept or rolled back): what each mode trains it with",
        ["mode", "rollouts per prompt", BUDGET.label, *(figure.label for figure in FAILED_CALL_FIGURES)],
        [
            [row.setting.name, rollouts_cell(row), row.cell(BUDGET), *(row.cell(f) for f in FAILED_CALL_FIGURES)]
            for row in table.rows
        ],
    )
    trained = Section(
        "What each mode trains (the final responses)",
        ["mode", "trajectories", *(figure.label for figure in TRAINING_FIGURES)],
        [[row.setting.name, str(row.trajectories), *(row.cell(f) for f in TRAINING_FIGURES)] for row in table.rows],
    )
    result = [failed, trained]
    if table.families:
        result.append(
            Section(
                "Per problem family, SAAR off without purification",
                ["family", "prompts", "trajectories", *(figure.label for figure in FAMILY_FIGURES)],
                [
                    [row.family, str(row.prompts), str(row.trajectories)]
                    + [format_estimate(row.estimates[f.name], f) for f in FAMILY_FIGURES]
                    for row in table.families
                ],
            )
        )
    return result


def table_notes(table: PurificationTable) -> list[str]:
    """What the reader needs to read the table: groups, budget, intervals, what "removed" means."""
    prompts = table.rows[0].prompts if table.rows else 0
    notes = [
        f"{prompts} prompt(s), {table.group_size} samples per prompt and SAAR mode; `saar` and "
        "`saar_negative_samples` are the SAAR-on groups as sampled, every other mode the SAAR-off groups of the "
        "same problems and seeds with its rule applied. Advantages: GRPO over each group's trajectories that "
        "still train.",
        f"Intervals: 95 % percentile bootstrap over prompts ({table.resamples} draws, the same draws for every "
        "cell); n is the ratio's denominator (tokens, trajectories, calls or prompts). No interval below 4 prompts.",
        "Failed-call tokens: every token of every assistant turn that made a failed call (model errors), kept in the "
        "response or rolled back by SAAR, the same denominator for every mode over the same rollouts; reinforced = "
        "trained with positive advantage (the wrong sign), penalized = with negative advantage (the right sign: a "
        "failed call in a failed trajectory, or a negative sample), not trained = the rest. "
        f"`{REMOVED}`: the mode's rule removes every failed call's token, so the share is zero by construction.",
        "`saar_negative_samples`: SAAR with `save_negative_samples` (max_negative_samples_per_group 1): each "
        "trajectory's first rolled-back first attempt of a recovered position trains its call's tokens with a "
        "negative advantage (the tool-DPO ablation's adjustment).",
        "Reinforced-error tokens: positive-advantage trained tokens in turns that kept a failed call (reasoning and "
        "code); penalized-success tokens: negative-advantage trained tokens in turns whose calls succeeded.",
    ]
    if table.roc_samples is not None:
        budget = table.generated_per_prompt
        matched = "no SAAR-on records to match"
        if table.roc_matched is not None:
            relation = "within" if table.roc_matched else "NOT within"
            matched = (
                f"{budget['roc']:.0f} generated tokens per prompt against SAAR's {budget['saar']:.0f}, {relation} ±10 %"
            )
        notes.append(
            f"Budget: RoC samples {table.roc_samples} rollouts per prompt (the first {table.roc_samples} SAAR-off "
            f"samples) and trains {table.roc_kept} of them (at least one correct and one incorrect when the group has "
            "them; rStar2-Agent keeps half, and a larger cut is taken only where its rounding cannot halve the "
            "group), the group whose generated tokens per prompt come closest "
            f"to SAAR's: {matched}; what it cut counts in its generated tokens."
        )
    notes += [f"Not shown: {reason}." for reason in table.skipped]
    return notes


def _markdown(section: Section) -> str:
    lines = [
        f"**{section.title}**",
        "",
        "| " + " | ".join(section.head) + " |",
        "|---|" + "---:|" * (len(section.head) - 1),
    ]
    for cells in section.rows:
        lines.append(f"| `{cells[0]}` | " + " | ".join(cells[1:]) + " |")
    return "\n".join(lines)


def purification_markdown(table: PurificationTable) -> str:
    parts = [_markdown(section) for section in sections(table)]
    return "\n\n".join(parts) + "\n\n" + "\n".join(f"- {note}" for note in table_notes(table))


def render_purification_table(table: PurificationTable, title: str = "purification modes on the same groups"):
    """The table for a terminal: one column per mode, each cell the value, its interval and n on three lines."""
    from rich.table import Table

    terminal = Table(title=title, show_lines=True)
    terminal.add_column("figure")
    for row in table.rows:
        terminal.add_column(row.setting.name, justify="right")
    terminal.add_row("rollouts per prompt", *(rollouts_cell(row) for row in table.rows))
    terminal.add_row("trajectories", *(str(row.trajectories) for row in table.rows))
    for figure in FIGURES:
        label = f"failed-call tokens {figure.label}" if figure in FAILED_CALL_FIGURES else figure.label
        cells = [row.cell(figure) for row in table.rows]
        terminal.add_row(label, *(cell.replace(" [", "\n[").replace(" (n", "\n(n") for cell in cells))
    terminal.caption = "\n".join(note.replace("`", "") for note in table_notes(table))
    return terminal
