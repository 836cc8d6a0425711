"""SAAR's scoring requests: the prompt-log-prob prefills that give a splice's importance ratio (`cleaner.saar.offpolicy`).

One `SpliceScorer` per trajectory sends its requests to the trajectory's own server (same request id, so the same
replica) through verl's `server_manager.generate`, and turns every way a request can end into one of:
- a score (`offpolicy.IsScore`, finite numbers only);
- `ScoringFailed`, a score that does not exist, with its `kind`:
  - `aborted`: the server aborted the request (vLLM answers no tokens with stop reason "aborted", SGLang "abort";
    SGLang's adapter raises on an aborted prompt-log-prob request) or it raised something else; transient, so it
    is sent again after a pause (verl's own client waits 1 s between attempts), `SCORING_ATTEMPTS` times in all;
  - `refused`: the server refused the request itself (verl's adapters raise `ValueError` for a prompt over the
    context length, vLLM for a bad request): deterministic, never sent again;
  - `non_finite`: a NaN or infinite log-prob on either side of the score (`offpolicy.NonFiniteLogprob`);
- `SaarConfigError`: a completed answer without prompt log-probs, a backend that cannot serve the setting at all.
A scoring failure is the measurement's, not the trajectory's: the caller counts it and trains the trajectory.

The requests in flight from one agent-loop worker process are bounded (`rollback_is_max_concurrent_scoring`): each is
a full prefill that also materialises chunk x vocabulary logits outside the engine's static memory budget
(docs/saar.md, "Scoring cost and memory").
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl.utils.profiler import simple_timer

from cleaner.names import AGENT_NAME
from cleaner.saar import offpolicy
from cleaner.saar.config import SaarConfig, SaarConfigError
from cleaner.saar.offpolicy import ScoringFailureKind

logger = logging.getLogger(__name__)

# A scoring request that is aborted or raises is sent this many times in all before its splice is left unscored.
SCORING_ATTEMPTS = 3
# Seconds between attempts, as verl's FullyAsyncLLMServerClient waits before resending an aborted request.
SCORING_RETRY_PAUSE_S = 1.0
# The stop reasons of an aborted request: vLLM's and SGLang's spelling.
ABORT_STOP_REASONS = ("aborted", "abort")
# Exceptions that say the request itself is wrong (verl's adapters: prompt over the context length; vLLM: a bad
# request). The same request would be refused again; anything else is the server's state and may pass next time.
REFUSALS: tuple[type[BaseException], ...] = (ValueError, TypeError)


class ScoringFailed(Exception):
    """A splice's score does not exist (see the module docstring for the kinds)."""

    def __init__(self, kind: ScoringFailureKind, message: str):
        super().__init__(message)
        self.failure = offpolicy.ScoringFailure(kind, message)


@dataclass(frozen=True)
class ScoredTokens:
    """Tokens of a stream and their indices in it: one side of a score."""

    stream: list[int]
    indices: Sequence[int]


async def pause(seconds: float) -> None:
    """The wait between attempts (a module function, so a test can observe it)."""
    await asyncio.sleep(seconds)


def aborted(output: Any) -> bool:
    """verl's servers answer an aborted request with no tokens (and stop reason "aborted" or "abort")."""
    return output.stop_reason in ABORT_STOP_REASONS or not output.token_ids


# One bound per agent-loop worker process and event loop (a semaphore belongs to the loop it first waits on).
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def scoring_slots(limit: int) -> asyncio.Semaphore:
    """The running event loop's semaphore for scoring requests (a new limit replaces it)."""
    loop = asyncio.get_running_loop()
    entry = _slots.get(loop)
    if entry is None or entry[0] != limit:
        entry = _slots[loop] = (limit, asyncio.Semaphore(limit))
    return entry[1]


class SpliceScorer:
    """The scoring requests of one trajectory."""

    def __init__(
        self,
        config: SaarConfig,
        server_manager: Any,
        sampling_params: dict[str, Any],
        engine: str | None,
        logprobs_mode: str | None,
    ):
        self.config = config
        self.server_manager = server_manager
        self.sampling_params = sampling_params
        self.engine = engine
        self.logprobs_mode = logprobs_mode

    @property
    def sampled_logprobs_usable(self) -> bool:
        """Whether sampled log-probs are on the prompt-log-prob scale here (one request per score)."""
        return offpolicy.sampled_logprobs_on_prompt_scale(self.sampling_params, self.engine, self.logprobs_mode)

    async def score(
        self,
        request_id: str,
        metrics: dict[str, Any],
        purified: ScoredTokens,
        error_context: ScoredTokens,
        sampled_logprobs: Sequence[float] | None,
    ) -> offpolicy.IsScore:
        """Per-token log ratios of tokens sampled in `error_context` and trained in `purified`: the target side is a
        prompt-log-prob prefill of the purified stream; the behaviour side is the log-probs the tokens were sampled
        with where those are on the same (raw, temperature-1) scale, else a second prefill of the error context."""
        target = offpolicy.logprobs_at(
            await self._prompt_logprobs(request_id, metrics, purified.stream), purified.indices
        )
        if sampled_logprobs is not None and self.sampled_logprobs_usable:
            behaviour = list(sampled_logprobs)
        else:
            stream = error_context.stream
            behaviour = offpolicy.logprobs_at(
                await self._prompt_logprobs(request_id, metrics, stream), error_context.indices
            )
        try:
            return offpolicy.token_log_ratios(target, behaviour)
        except offpolicy.NonFiniteLogprob as error:
            raise ScoringFailed("non_finite", str(error)) from error

    async def _prompt_logprobs(self, request_id: str, metrics: dict[str, Any], ids: list[int]) -> list[float]:
        failure = ""
        for attempt in range(1, SCORING_ATTEMPTS + 1):
            if attempt > 1:
                await pause(SCORING_RETRY_PAUSE_S)
            try:
                async with scoring_slots(self.config.rollback_is_max_concurrent_scoring):
                    with simple_timer("generate_sequences", metrics):  # inference time, like the generations
                        output = await self.server_manager.generate(
                            request_id=request_id,
                            prompt_ids=list(ids),
                            sampling_params=offpolicy.scoring_params(self.sampling_params),
                        )
            except REFUSALS as error:
                raise ScoringFailed("refused", f"the server refused the scoring request: {_describe(error)}") from error
            except Exception as error:
                failure = _describe(error)
            else:
                if not aborted(output):
                    return self._token_logprobs(output, len(ids))
                failure = f"aborted (stop_reason={output.stop_reason!r}, {len(output.token_ids)} tokens)"
            logger.warning("%s: scoring request %d/%d failed: %s", AGENT_NAME, attempt, SCORING_ATTEMPTS, failure)
        raise ScoringFailed("aborted", f"{SCORING_ATTEMPTS} scoring requests failed, the last: {failure}")

    def _token_logprobs(self, output: Any, length: int) -> list[float]:
        try:
            return offpolicy.prompt_token_logprobs(output.extra_fields, length)
        except offpolicy.PromptLogprobsError as error:
            key = "rollback_is_threshold" if self.config.rollback_is_threshold is not None else "rollback_is_measure"
            raise SaarConfigError(
                f"actor_rollout_ref.rollout.multi_turn.{key} needs an inference server that returns prompt log-probs "
                f"(sampling param prompt_logprobs: verl's vLLM and SGLang servers and the `cpu` rollout do): {error}. "
                f"Unset {key} or use such a backend."
            ) from error


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
