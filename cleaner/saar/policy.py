"""The per-trajectory SAAR state machine: what to do after each tool round and each resample.

The agent loop reports events (a tool round's outcomes, a resample that came back unusable) and gets an
`Action` back; it owns the tokens, the policy owns the decisions and the statistics. Checkpoints and
turns are opaque to the policy.

At most one failing position is open at a time. A position opens when a first-attempt round fails with
a rollback-eligible model error and no infrastructure error; every call of that turn is then resampled
together (parallel calls share one assistant turn, so they are retried as one). A retry round succeeds
only when every call in it succeeds.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from cleaner.saar.config import SaarConfig
from cleaner.saar.outcome import OutcomeKind, ToolOutcome
from cleaner.saar.similarity import SIMILARITIES
from cleaner.saar.splice import SpliceMode
from cleaner.saar.stats import RollbackEvent, TrajectoryStats

logger = logging.getLogger(__name__)

UnusableResample = Literal["empty", "no_call", "limit"]


class Action(Enum):
    CONTINUE = "continue"  # keep what happened and go on as the stock loop would
    RETRY = "retry"  # keep the error as a tool message and resample the failed turn
    PURIFY = "purify"  # a retry succeeded: splice it over the failed turn, drop the failed branch


def draw_gate(seed: int, sample_key: str, probability: float) -> bool:
    """Whether this trajectory gets SAAR: one reproducible uniform draw from (seed, sample key)."""
    if probability >= 1.0:
        return True
    if probability <= 0.0:
        return False
    digest = hashlib.sha256(f"{seed}\x00{sample_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < probability


@dataclass
class OpenPosition:
    checkpoint: Any  # the loop's snapshot of the state just before the failed turn
    failed_turn: Any  # the failed assistant turn, for a shallow splice
    event: RollbackEvent  # its position and failed code, plus what the retries did
    error_texts: list[str] = field(default_factory=list)
    exception_types: list[str | None] = field(default_factory=list)


class RollbackPolicy:
    def __init__(self, config: SaarConfig, active: bool, stats: TrajectoryStats):
        self.config = config
        self.active = active
        self.stats = stats
        self.open: OpenPosition | None = None
        self._similarity = SIMILARITIES[config.rollback_similarity]
        stats.rollback_enabled = int(active)

    @property
    def resampling(self) -> bool:
        """True when the next generation is a resample of an open failing position."""
        return self.open is not None

    def on_round(
        self,
        outcomes: Sequence[ToolOutcome],
        *,
        position: int,
        code: str,
        feedback: str,
        checkpoint: Any = None,
        failed_turn: Any = None,
    ) -> Action:
        """Account for one executed tool round and decide what happens next.

        `position` is the index of the assistant turn that made the calls, `code` their code, `feedback`
        the tool text the model is shown; `checkpoint`/`failed_turn` are kept if a position opens.
        """
        self.count_round(outcomes, first_attempt=self.open is None)
        infra = any(outcome.kind is OutcomeKind.INFRA_ERROR for outcome in outcomes)
        failed = [outcome for outcome in outcomes if outcome.kind is OutcomeKind.MODEL_ERROR]
        if self.open is None:
            eligible = any(outcome.category in self.config.rollback_on_errors for outcome in failed)
            if not (self.active and eligible and not infra and self.config.max_tool_retries > 0):
                return Action.CONTINUE
            first = next(outcome for outcome in failed if outcome.category in self.config.rollback_on_errors)
            event = RollbackEvent(
                position=position,
                failed_code=code,
                error_category=first.category.value,
                exception_type=first.exception_type,
                error_text=feedback,
                model_errors=len(failed),
            )
            self.open = OpenPosition(checkpoint, failed_turn, event, [feedback], [first.exception_type])
            self.stats.rollbacks_triggered += 1
            return Action.RETRY
        if infra:
            self._give_up("infrastructure error during a retry")
            return Action.CONTINUE
        if not failed:
            return Action.PURIFY
        self.open.event.model_errors += len(failed)
        self.open.error_texts.append(feedback)
        self.open.exception_types.extend(outcome.exception_type for outcome in failed)
        if self.open.event.retries < self.config.max_tool_retries:
            return Action.RETRY
        self._give_up(f"all {self.config.max_tool_retries} retries failed")
        return Action.CONTINUE

    def on_resample(self, generated_tokens: int) -> None:
        """A resample of the open position was generated (it costs a retry whatever comes of it)."""
        assert self.open is not None, "on_resample without an open position"
        self.open.event.retries += 1
        self.open.event.resampled_tokens += generated_tokens
        self.stats.retries_used += 1
        self.stats.resampled_tokens += generated_tokens

    def on_unusable_resample(self, reason: UnusableResample) -> Action:
        """The resample cannot be executed: empty (retry if budget is left), no tool call, or a limit hit."""
        assert self.open is not None, "on_unusable_resample without an open position"
        if reason == "empty" and self.open.event.retries < self.config.max_tool_retries:
            return Action.RETRY
        self._give_up(f"resample unusable: {reason}")
        return Action.CONTINUE

    def choose_mode(self, replacement_code: str, splittable: bool) -> tuple[SpliceMode, float]:
        """Shallow when the codes are similar (>= gamma) and both turns split at a call boundary, else deep."""
        assert self.open is not None, "choose_mode without an open position"
        similarity = self._similarity(self.open.event.failed_code, replacement_code)
        shallow = splittable and similarity >= self.config.rollback_similarity_threshold
        return ("shallow" if shallow else "deep"), similarity

    def on_purified(
        self, mode: SpliceMode, similarity: float, replacement_code: str, mentions_error: bool
    ) -> RollbackEvent:
        assert self.open is not None, "on_purified without an open position"
        event = self.open.event
        event.mode = mode
        event.similarity = similarity
        event.replacement_code = replacement_code
        self.stats.rollbacks_recovered += 1
        self.stats.purified_errors += event.model_errors
        if mode == "shallow":
            self.stats.rollbacks_shallow += 1
        else:
            self.stats.rollbacks_deep += 1
            self.stats.deep_mentions_error += int(mentions_error)
        self.stats.rollback_events.append(event)
        self.open = None
        return event

    def close_open(self, reason: str) -> None:
        """The open position ends unrecovered (e.g. the trajectory ended while it was open)."""
        self._give_up(reason)

    def _give_up(self, reason: str) -> None:
        assert self.open is not None
        logger.debug("SAAR position %d not recovered: %s", self.open.event.position, reason)
        self.open.event.mode = "failed"
        self.stats.rollbacks_failed += 1
        self.stats.rollback_events.append(self.open.event)
        self.open = None

    def count_round(self, outcomes: Sequence[ToolOutcome], first_attempt: bool) -> None:
        """Tool-call statistics of one round (also used when SAAR is inactive for the trajectory)."""
        stats = self.stats
        stats.tool_calls += len(outcomes)
        if first_attempt:
            stats.first_attempt_calls += len(outcomes)
            stats.first_attempt_successes += sum(outcome.is_ok for outcome in outcomes)
        for outcome in outcomes:
            if outcome.category is not None:
                stats.count_failure(outcome.category)
            if outcome.kind is OutcomeKind.INFRA_ERROR:
                stats.infra_errors += 1
