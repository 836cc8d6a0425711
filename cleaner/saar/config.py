"""SAAR settings, read from verl's `actor_rollout_ref.rollout.multi_turn` section.

Every key the reference code's recipes pass (`+...multi_turn.<key>=`) is a field here, so its lines keep
working; the others are settings the reference had hard-coded. The keys are the dataclass's fields
(`CONFIG_KEYS`), so a new field is read, and accepted by verl's config schema, without another list to edit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from cleaner.saar.offpolicy import IS_STATISTICS
from cleaner.saar.outcome import INFRA_ERROR_CATEGORIES, MODEL_ERROR_CATEGORIES, ErrorCategory
from cleaner.saar.similarity import SIMILARITIES

# What stays of a failing position whose retries never succeeded: only its last attempt (the reference) or all.
EXHAUSTED_KEEP_MODES = ("last", "all")
# What the gate and the measurement score for a shallow splice: the spliced call tokens, or the whole new turn in
# the context a deep splice would give it (the reference's gate, which always splices deep).
SHALLOW_SCORED_SPANS = ("call", "turn")


class SaarConfigError(ValueError):
    """A SAAR setting under `actor_rollout_ref.rollout.multi_turn` is invalid."""


@dataclass(frozen=True)
class SaarConfig:
    enable_tool_rollback: bool = False
    max_tool_retries: int = 3  # K: resamples allowed per failing tool position
    rollback_probability: float = 1.0  # share of trajectories that get SAAR (drawn once per trajectory)
    rollback_similarity_threshold: float = 0.5  # gamma: similarity >= gamma is a shallow (call-only) splice
    rollback_similarity: str = "difflib"
    rollback_in_validation: bool = False
    rollback_on_errors: tuple[ErrorCategory, ...] = MODEL_ERROR_CATEGORIES
    rollback_seed: int = 0
    # Negative samples (the reference's keys and defaults): keep failed attempts as extra training samples.
    save_negative_samples: bool = False
    max_negative_samples_per_group: int = 1  # cap per trajectory (the reference's scripts pass 0)
    rollback_exhausted_keep: str = "last"  # an unrecovered position keeps its last attempt ("last") or all ("all")
    drop_infra_error_trajectories: bool = False  # zero the loss mask of trajectories with an infrastructure error
    # Off-policy spans (docs/saar.md "Off-policy spans"). Plan B: score each successful retry in its purified context;
    # below this importance ratio the failure is kept (append), at or above it the retry is spliced in (replace).
    rollback_is_threshold: float | None = None  # None: always replace (the paper)
    # What the gate compares with log τ: the sequence sum of the per-token log ratios (the reference's design note)
    # or their mean clamped to [-3, 3] (the reference's development code, where their recipe's τ = 0.5 comes from).
    rollback_is_statistic: str = "sequence"
    rollback_is_measure: bool = False  # score every splice and record its log IS ratio, but always replace
    # Scoring requests (prompt-log-prob prefills) in flight at once from one agent-loop worker process; each is a full
    # prefill whose logits live outside the engine's static memory budget (docs/saar.md "Scoring cost and memory").
    rollback_is_max_concurrent_scoring: int = 8
    rollback_is_shallow_span: str = "call"  # a shallow splice is scored on its call tokens ("call") or whole turn
    rollback_is_correction: bool = (
        False  # Plan C: replace, and let verl's token-level rollout IS correct the spliced tokens
    )
    # The n-th failing tool round in a row starts the rollback (1: the paper); the count restarts after every round
    # that does not fail with a rollback-eligible error, and after every closed position.
    rollback_after_errors: int = 1

    def __post_init__(self) -> None:
        _require(isinstance(self.enable_tool_rollback, bool), "enable_tool_rollback must be true or false")
        _require(isinstance(self.rollback_in_validation, bool), "rollback_in_validation must be true or false")
        _require(
            _is_int(self.max_tool_retries) and self.max_tool_retries >= 0,
            f"max_tool_retries must be an integer >= 0, got {self.max_tool_retries!r}",
        )
        _require(
            _is_number(self.rollback_probability) and 0.0 <= self.rollback_probability <= 1.0,
            f"rollback_probability must be a number in [0, 1], got {self.rollback_probability!r}",
        )
        _require(
            _is_number(self.rollback_similarity_threshold) and 0.0 <= self.rollback_similarity_threshold <= 1.0,
            f"rollback_similarity_threshold must be a number in [0, 1], got {self.rollback_similarity_threshold!r}",
        )
        _require(
            self.rollback_similarity in SIMILARITIES,
            f"rollback_similarity must be one of {sorted(SIMILARITIES)}, got {self.rollback_similarity!r}",
        )
        _require(_is_int(self.rollback_seed), f"rollback_seed must be an integer, got {self.rollback_seed!r}")
        _require(len(self.rollback_on_errors) > 0, "rollback_on_errors must name at least one model error category")
        _require(isinstance(self.save_negative_samples, bool), "save_negative_samples must be true or false")
        _require(
            _is_int(self.max_negative_samples_per_group) and self.max_negative_samples_per_group >= 0,
            f"max_negative_samples_per_group must be an integer >= 0, got {self.max_negative_samples_per_group!r}",
        )
        _require(
            self.rollback_exhausted_keep in EXHAUSTED_KEEP_MODES,
            f"rollback_exhausted_keep must be one of {list(EXHAUSTED_KEEP_MODES)}, got {self.rollback_exhausted_keep!r}",
        )
        _require(
            isinstance(self.drop_infra_error_trajectories, bool),
            "drop_infra_error_trajectories must be true or false",
        )
        _require(
            self.rollback_is_threshold is None
            or (_is_number(self.rollback_is_threshold) and 0.0 < self.rollback_is_threshold < math.inf),
            f"rollback_is_threshold must be a number > 0 (an importance ratio) or null, got {self.rollback_is_threshold!r}",
        )
        _require(
            self.rollback_is_statistic in IS_STATISTICS,
            f"rollback_is_statistic must be one of {list(IS_STATISTICS)}, got {self.rollback_is_statistic!r}",
        )
        _require(
            self.rollback_is_statistic == "sequence" or self.rollback_is_threshold is not None,
            f"rollback_is_statistic={self.rollback_is_statistic} chooses what the rollback_is_threshold gate compares; "
            "without rollback_is_threshold it has no effect: set both or neither",
        )
        _require(isinstance(self.rollback_is_measure, bool), "rollback_is_measure must be true or false")
        _require(isinstance(self.rollback_is_correction, bool), "rollback_is_correction must be true or false")
        _require(
            self.rollback_is_shallow_span in SHALLOW_SCORED_SPANS,
            f"rollback_is_shallow_span must be one of {list(SHALLOW_SCORED_SPANS)}, got {self.rollback_is_shallow_span!r}",
        )
        _require(
            self.rollback_is_shallow_span == "call" or self.scores_splices,
            "rollback_is_shallow_span=turn chooses what the gate or the measurement scores; without "
            "rollback_is_threshold or rollback_is_measure it has no effect",
        )
        _require(
            _is_int(self.rollback_is_max_concurrent_scoring) and self.rollback_is_max_concurrent_scoring >= 1,
            "rollback_is_max_concurrent_scoring must be an integer >= 1, "
            f"got {self.rollback_is_max_concurrent_scoring!r}",
        )
        _require(
            _is_int(self.rollback_after_errors) and self.rollback_after_errors >= 1,
            f"rollback_after_errors must be an integer >= 1, got {self.rollback_after_errors!r}",
        )

    @property
    def scores_splices(self) -> bool:
        """Whether each splice is scored in its purified context (the Plan B gate needs it; measuring asks for it)."""
        return self.rollback_is_threshold is not None or self.rollback_is_measure

    @classmethod
    def from_multi_turn(cls, multi_turn: Mapping[str, Any] | None) -> SaarConfig:
        """Build from `actor_rollout_ref.rollout.multi_turn` (a DictConfig or dict); absent keys keep defaults."""
        section = multi_turn or {}
        values = {key: section[key] for key in CONFIG_KEYS if key in section and section[key] is not None}
        if "rollback_on_errors" in values:
            values["rollback_on_errors"] = parse_error_categories(values["rollback_on_errors"])
        return cls(**values)


# The multi_turn keys SAAR reads: exactly the fields of SaarConfig.
CONFIG_KEYS: tuple[str, ...] = tuple(spec.name for spec in fields(SaarConfig))


def parse_error_categories(raw: Any) -> tuple[ErrorCategory, ...]:
    if isinstance(raw, str) or not hasattr(raw, "__iter__"):
        raise SaarConfigError(f"rollback_on_errors must be a list of error categories, got {raw!r}")
    model_values = [category.value for category in MODEL_ERROR_CATEGORIES]
    infra_values = {category.value for category in INFRA_ERROR_CATEGORIES}
    categories = []
    for item in raw:
        name = str(item)
        if name in infra_values:
            raise SaarConfigError(
                f"rollback_on_errors: {name!r} is an infrastructure error; those are never rolled back "
                f"(they mark the trajectory instead). Model error categories: {model_values}"
            )
        if name not in model_values:
            hint = (
                " (the reference code's exception names were only labels; exceptions are the 'exception' category)"
                if name[:1].isupper()
                else ""
            )
            raise SaarConfigError(f"rollback_on_errors: unknown category {name!r}{hint}; choose from {model_values}")
        categories.append(ErrorCategory(name))
    return tuple(dict.fromkeys(categories))


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SaarConfigError(f"actor_rollout_ref.rollout.multi_turn: {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
