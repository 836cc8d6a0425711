"""The per-trajectory SAAR state machine: what to do after each tool round and each resample.

The agent loop reports events (a tool round's outcomes, a resample that came back unusable) and gets an
`Action` back; it owns the tokens, the policy owns the decisions and the statistics. Stream positions and
turns are opaque to the policy.

At most one failing position is open at a time. A position opens when a first-attempt round fails with
a rollback-eligible model error and no infrastructure error, and a retry can still be executed; every
call of that turn is then resampled together (parallel calls share one assistant turn, so they are
retried as one). A retry round succeeds only when every call in it succeeds. With `rollback_after_errors`
n > 1, the first n - 1 failing rounds in a row stay as in the baseline (the model corrects itself in
the open); the n-th opens the position, its turn being the one a successful retry replaces. A position
counts as triggered once its first retry is generated; one closed before that leaves no trace.

A position that ends without a successful retry (retries exhausted, no retry executable, an
infrastructure error, a resample without a call, an empty resample with no budget left, or the end of
the trajectory) is *given up*: the loop then applies `rollback_exhausted_keep` to the chain of attempts.
With `last` (the reference's behaviour) only the last executed attempt and what followed it stay; the
model-error calls of the earlier attempts count as purified. With `all` the whole chain stays.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from cleaner.saar import offpolicy
from cleaner.saar.config import SaarConfig
from cleaner.saar.offpolicy import IsScore, ScoringFailure
from cleaner.saar.outcome import ErrorCategory, OutcomeKind, ToolOutcome
from cleaner.saar.similarity import SIMILARITIES
from cleaner.saar.splice import SpliceMode
from cleaner.saar.stats import IsDecision, RollbackEvent, TrajectoryStats

logger = logging.getLogger(__name__)

UnusableResample = Literal["empty", "no_call"]


class Action(Enum):
    CONTINUE = "continue"  # keep what happened and go on as the stock loop would
    RETRY = "retry"  # keep the error as a tool message and resample the failed turn
    PURIFY = "purify"  # a retry succeeded: splice it over the failed turn, drop the failed branch
    GIVE_UP = "give_up"  # the open position ended unrecovered: apply the keep rule (`closed`), then go on


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
    stream_position: Any  # the loop's stream position just before the failed turn
    failed_turn: Any  # the failed assistant turn, for a shallow splice
    event: RollbackEvent  # its position and failed code, plus what the retries did
    error_texts: list[str] = field(default_factory=list)
    exception_types: list[str | None] = field(default_factory=list)
    last_round: Any = None  # the loop's stream position just before the last executed attempt (the one `last` keeps)
    last_round_errors: int = 0  # model-error calls of that attempt
    ended_on_error: bool = False  # given up right after a failed round (budget spent or no retry executable)


def exhausted_note(attempts: int) -> str:
    """The reference's hint after a position failed repeatedly, added after its last error: change the approach.

    It names no error of another attempt, so it stays true of the purified context, where only the last attempt
    is left. `attempts` counts every executed attempt at the position (the reference printed its retry count).
    """
    return (
        f"\n\nNote: This approach has been attempted {attempts} times with the same type of error. "
        "Consider trying a different algorithm, method, or approach to solve this problem."
    )


class RollbackPolicy:
    def __init__(self, config: SaarConfig, active: bool, stats: TrajectoryStats):
        self.config = config
        self.active = active
        self.stats = stats
        self.open: OpenPosition | None = None
        self.closed: OpenPosition | None = None  # the position given up last (what GIVE_UP refers to)
        self._similarity = SIMILARITIES[config.rollback_similarity]
        self._consecutive_failures = 0  # failing first-attempt rounds in a row (rollback_after_errors)
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
        stream_position: Any = None,
        failed_turn: Any = None,
        can_retry: bool = True,
    ) -> Action:
        """Account for one executed tool round and decide what happens next.

        `position` is the index of the assistant turn that made the calls, `code` their code, `feedback`
        the error text the model is shown (failed calls only); `stream_position`/`failed_turn` are kept if a
        position opens. `can_retry` is False when a retry after this round could not be executed (a turn
        limit would stop it before its calls run): then no retry is generated.
        """
        self.count_round(outcomes, first_attempt=self.open is None)
        infra = any(outcome.kind is OutcomeKind.INFRA_ERROR for outcome in outcomes)
        failed = [outcome for outcome in outcomes if outcome.kind is OutcomeKind.MODEL_ERROR]
        if self.open is None:
            eligible = any(outcome.category in self.config.rollback_on_errors for outcome in failed)
            self._consecutive_failures = self._consecutive_failures + 1 if eligible and not infra else 0
            if self._consecutive_failures < self.config.rollback_after_errors:
                # tolerated: this failure and its error stay, as in the baseline
                self.stats.tolerated_errors += int(self._consecutive_failures > 0)
                return Action.CONTINUE
            if not (self.active and self.config.max_tool_retries > 0 and can_retry):
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
            self.open = OpenPosition(
                stream_position, failed_turn, event, [feedback], [first.exception_type], stream_position, len(failed)
            )
            return Action.RETRY
        if not failed and not infra:
            return Action.PURIFY
        self.open.event.model_errors += len(failed)
        self.open.last_round, self.open.last_round_errors = stream_position, len(failed)
        if infra:
            return self._give_up("infrastructure error during a retry")
        self.open.error_texts.append(feedback)
        self.open.exception_types.extend(outcome.exception_type for outcome in failed)
        if self.open.event.retries < self.config.max_tool_retries and can_retry:
            return Action.RETRY
        self.open.ended_on_error = True
        if not can_retry:
            return self._give_up("no retry can be executed within the turn limits")
        return self._give_up(f"all {self.config.max_tool_retries} retries failed")

    def note(self) -> str | None:
        """The text to add to the error of the round that is being given up, if any (from 2 retries on)."""
        if self.closed is None or not self.closed.ended_on_error or self.closed.event.retries < 2:
            return None
        return exhausted_note(self.closed.event.retries + 1)

    def on_resample(self, generated_tokens: int) -> None:
        """A resample of the open position was generated (it costs a retry whatever comes of it)."""
        assert self.open is not None, "on_resample without an open position"
        if self.open.event.retries == 0:
            self.stats.rollbacks_triggered += 1  # triggered = a failing position that got at least one retry
        self.open.event.retries += 1
        self.open.event.resampled_tokens += generated_tokens
        self.stats.retries_used += 1
        self.stats.resampled_tokens += generated_tokens

    def on_unusable_resample(self, reason: UnusableResample) -> Action:
        """The resample cannot be executed: empty (retry if budget is left), no tool call, or a limit hit."""
        assert self.open is not None, "on_unusable_resample without an open position"
        if reason == "empty" and self.open.event.retries < self.config.max_tool_retries:
            return Action.RETRY
        return self._give_up(f"resample unusable: {reason}")

    def choose_mode(self, replacement_code: str, splittable: bool) -> tuple[SpliceMode, float]:
        """Shallow when the codes are similar (>= gamma) and both turns split at a call boundary, else deep."""
        assert self.open is not None, "choose_mode without an open position"
        similarity = self._similarity(self.open.event.failed_code, replacement_code)
        shallow = splittable and similarity >= self.config.rollback_similarity_threshold
        return ("shallow" if shallow else "deep"), similarity

    def is_decision(self, score: IsScore) -> IsDecision | None:
        """The rollback_is_threshold gate's decision on a score (None without a gate: measuring only)."""
        threshold = self.config.rollback_is_threshold
        if threshold is None:
            return None
        return offpolicy.gate(score, threshold, self.config.rollback_is_statistic)

    def unscored_decision(self, failure: ScoringFailure) -> IsDecision | None:
        """Count a scoring failure and give the gate's decision for the unscored position: append, so every trained
        token stays where it was sampled (the reference's gate replaces instead); None without a gate (measuring
        only: the position is purified as it would be unmeasured)."""
        self.on_scoring_failed(failure)
        return "append" if self.config.rollback_is_threshold is not None else None

    def on_purified(
        self,
        mode: SpliceMode,
        similarity: float,
        replacement_code: str,
        mentions_error: bool,
        score: IsScore | None = None,
        decision: IsDecision | None = None,
        scoring_error: ScoringFailure | None = None,
    ) -> RollbackEvent:
        """The successful retry was spliced in (`mode`); `score`/`decision` if it was scored and gated."""
        event = self._recovered(mode, similarity, replacement_code, score, decision, scoring_error)
        self.stats.purified_errors += event.model_errors
        if mode == "shallow":
            self.stats.rollbacks_shallow += 1
        else:
            self.stats.rollbacks_deep += 1
            self.stats.deep_mentions_error += int(mentions_error)
        self.stats.planb_replaces += int(decision == "replace")
        return event

    def on_appended(
        self,
        mode: SpliceMode,
        similarity: float,
        replacement_code: str,
        score: IsScore | None,
        scoring_error: ScoringFailure | None = None,
    ) -> RollbackEvent:
        """The gate kept the failure: the retry stays after it, as in the baseline (`mode`: the splice it scored).
        Without a score (`scoring_error`) the gate keeps it too: nothing unscored is spliced in."""
        event = self._recovered(mode, similarity, replacement_code, score, "append", scoring_error)
        self.stats.planb_appends += 1
        return event

    def _recovered(
        self,
        mode: SpliceMode,
        similarity: float,
        replacement_code: str,
        score: IsScore | None,
        decision: IsDecision | None,
        scoring_error: ScoringFailure | None,
    ) -> RollbackEvent:
        assert self.open is not None, "a recovered position without an open position"
        event = self.open.event
        event.mode = mode
        event.similarity = similarity
        event.replacement_code = replacement_code
        self._record_score(event, score, decision, scoring_error)
        self.stats.rollbacks_recovered += 1
        self.stats.rollback_events.append(event)
        self.open = None
        self._consecutive_failures = 0
        return event

    def on_exhausted_scored(
        self, score: IsScore | None, decision: IsDecision | None, error: ScoringFailure | None = None
    ) -> None:
        """The kept last attempt of the position given up last (`closed`, kept "last") was scored (or its scoring
        failed: `error`). An append keeps every attempt instead, as `rollback_exhausted_keep: all` would."""
        assert self.closed is not None and self.closed.event.kept == "last", "no exhausted position keeps its last"
        position = self.closed
        self._record_score(position.event, score, decision, error)
        if decision == "append":
            position.event.kept = "all"
            self.stats.purified_errors -= position.event.model_errors - position.last_round_errors
        self.stats.planb_exhausted_appends += int(decision == "append")
        self.stats.planb_exhausted_replaces += int(decision == "replace")

    def on_scoring_failed(self, failure: ScoringFailure) -> None:
        """A score could not be had. The measurement failed, not the trajectory: counted (`saar_fail_scoring_failed`,
        and on the position's event, which records `failure`), never an infrastructure error, so the trajectory
        trains as the gate's fallback (append) or the measurement (replace) leaves it."""
        self.stats.count_failure(ErrorCategory.SCORING_FAILED)
        logger.warning("SAAR: scoring failed (%s), the position is not scored: %s", failure.kind, failure.message)

    def _record_score(
        self,
        event: RollbackEvent,
        score: IsScore | None,
        decision: IsDecision | None,
        error: ScoringFailure | None = None,
    ) -> None:
        event.is_decision = decision
        if error is not None:
            event.is_error, event.is_failure = error.message, error.kind
        if decision is not None and score is not None:
            event.is_statistic = self.config.rollback_is_statistic
            event.is_statistic_value = score.statistic(self.config.rollback_is_statistic)
        if score is not None:
            event.log_is_ratio, event.is_tokens = score.log_ratio, score.tokens
            event.is_token_log_ratios = list(score.token_log_ratios)
            self.stats.is_scored += 1

    def close_open(self, reason: str) -> Action:
        """The open position ends unrecovered (e.g. the trajectory ended while it was open)."""
        return self._give_up(reason)

    def _give_up(self, reason: str) -> Action:
        """Close the open position unrecovered; it stays readable as `closed` until the next one closes."""
        position = self.open
        assert position is not None
        self.open, self.closed = None, position
        self._consecutive_failures = 0
        if position.event.retries == 0:
            # No retry was generated (e.g. the failed call's own response filled the budget): nothing was
            # triggered, the position stays exactly as the baseline would have it.
            logger.debug("SAAR position %d closed before any retry: %s", position.event.position, reason)
            return Action.GIVE_UP
        logger.debug("SAAR position %d not recovered: %s", position.event.position, reason)
        event = position.event
        event.mode = "failed"
        event.kept = self.config.rollback_exhausted_keep
        if event.kept == "last":
            # the earlier attempts and their errors leave the trajectory; only the last attempt's stay
            self.stats.purified_errors += event.model_errors - position.last_round_errors
        self.stats.rollbacks_failed += 1
        self.stats.rollback_events.append(event)
        return Action.GIVE_UP

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
