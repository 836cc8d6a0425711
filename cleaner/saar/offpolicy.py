"""How far off-policy a splice is: the importance ratio of the spliced tokens, and the Plan B gate on it.

Every token SAAR splices in was sampled by pi(. | a context that still held the failed attempt and its error)
(the behaviour policy); after purification it is trained as if sampled in the purified context. For the spliced
tokens t_1..t_n of one replacement, with d_i = log pi(t_i | purified context, t_<i) - log pi_b(t_i | error context, t_<i),

    sequence:    log IS = sum_i d_i                        (the reference authors' design note)
    token_mean:  clamp(mean_i d_i, -3, 3)                  (the reference authors' development code)

and the gate (`rollback_is_threshold` τ) keeps the failure (append) when the statistic is below log τ, else the
retry is spliced in (replace). See docs/saar.md, "Off-policy spans".

The scores come from the inference server through verl's `generate` contract: sampling parameters with
`prompt_logprobs=0` and `max_tokens=1` return `extra_fields["prompt_logprobs"]`, one row per prompt token, row i
holding `[log-prob of token i+1]` and the last row a dummy (the first token has no log-prob). Both of verl's
engines compute prompt log-probs from the raw logits at temperature 1 without top-k/top-p, while the log-probs of
sampled tokens are taken after the sampling transform (vLLM's `processed_logprobs`: temperature and top-k/top-p
renormalisation; SGLang: temperature, before top-k/top-p). Both sides of the ratio must be of one distribution,
so the sampled log-probs stand in for the behaviour side only where the engine's code makes them equal to the raw
ones (`sampled_logprobs_on_prompt_scale`); elsewhere the behaviour side is a second prompt-log-prob prefill of the
error context.

A score is made of finite numbers only: a NaN or infinite log-prob on either side (a float16 overflow, a broken
row) is a `NonFiniteLogprob`, a scoring failure the caller counts, never a ratio the gate could decide on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cleaner.saar.stats import IsDecision

PROMPT_LOGPROBS_KEY = "prompt_logprobs"


class PromptLogprobsError(ValueError):
    """The inference server's answer does not carry prompt log-probs in verl's layout."""


class NonFiniteLogprob(ValueError):
    """A log-prob on one side of a score is NaN or infinite: the score does not exist (a scoring failure)."""


# Why a score does not exist: the server aborted the request after every attempt (or raised), it refused the
# request itself (e.g. a prompt over the context length), or a log-prob on either side was NaN or infinite.
ScoringFailureKind = Literal["aborted", "refused", "non_finite"]
SCORING_FAILURE_KINDS: tuple[str, ...] = ("aborted", "refused", "non_finite")


@dataclass(frozen=True)
class ScoringFailure:
    """A splice that could not be scored: why (`kind`) and what happened (`message`)."""

    kind: ScoringFailureKind
    message: str


IsStatistic = Literal["sequence", "token_mean"]
IS_STATISTICS: tuple[str, ...] = ("sequence", "token_mean")
# The reference code clamps the per-token mean log ratio to this range before comparing it with log τ.
TOKEN_MEAN_CLAMP = 3.0


@dataclass(frozen=True)
class IsScore:
    """The per-token log ratios d_i of the scored tokens (target minus behaviour log-prob)."""

    token_log_ratios: tuple[float, ...]

    def __post_init__(self) -> None:
        if not all(math.isfinite(value) for value in self.token_log_ratios):
            raise NonFiniteLogprob(f"non-finite log ratio among {list(self.token_log_ratios)}")

    @property
    def log_ratio(self) -> float:
        """The sequence-level log IS: the sum of the per-token log ratios."""
        return math.fsum(self.token_log_ratios)

    @property
    def tokens(self) -> int:
        return len(self.token_log_ratios)

    def statistic(self, kind: IsStatistic) -> float:
        """What the gate compares with log τ: the sum, or the reference code's clamped per-token mean."""
        if kind == "sequence":
            return self.log_ratio
        mean = self.log_ratio / max(self.tokens, 1)
        return min(max(mean, -TOKEN_MEAN_CLAMP), TOKEN_MEAN_CLAMP)


def token_log_ratios(target: Sequence[float], behaviour: Sequence[float]) -> IsScore:
    """d_i = target_i - behaviour_i; `NonFiniteLogprob` names the side and token of a NaN or infinite log-prob."""
    if len(target) != len(behaviour):
        raise ValueError(f"{len(target)} target log-probs for {len(behaviour)} behaviour log-probs")
    for side, values in (("target (purified context)", target), ("behaviour (sampling context)", behaviour)):
        bad = [index for index, value in enumerate(values) if not math.isfinite(value)]
        if bad:
            raise NonFiniteLogprob(
                f"{side} log-prob of scored token {bad[0]} is {values[bad[0]]} ({len(bad)} of {len(values)} non-finite)"
            )
    return IsScore(tuple(t - b for t, b in zip(target, behaviour)))


def scoring_params(sampling_params: Mapping[str, Any]) -> dict[str, Any]:
    """The trajectory's own sampling parameters, asking for one token and the log-prob of every prompt token.

    The engines compute prompt log-probs from the raw logits (temperature 1, no top-k/top-p) whatever the
    request's sampling parameters; those only shape the one token sampled after the prompt.
    """
    return {**sampling_params, "max_tokens": 1, PROMPT_LOGPROBS_KEY: 0}


def prompt_token_logprobs(extra_fields: Mapping[str, Any] | None, prompt_length: int) -> list[float]:
    """Per prompt token, the log-prob the server gave it (index 0, the first token, has none: NaN).

    A row without a number is a server outside verl's contract (`PromptLogprobsError`); a number that is NaN or
    infinite is returned as it is, for the score that uses it to refuse (`token_log_ratios`)."""
    rows = (extra_fields or {}).get(PROMPT_LOGPROBS_KEY)
    if rows is None:
        raise PromptLogprobsError("the server returned no extra_fields['prompt_logprobs']")
    if len(rows) != prompt_length:
        raise PromptLogprobsError(f"the server returned {len(rows)} prompt_logprobs rows for {prompt_length} tokens")
    values = [math.nan]
    for index, row in enumerate(rows[:-1]):  # row i scores token i + 1; the last row is a dummy
        value = row[0] if isinstance(row, Sequence) and not isinstance(row, str) and row else row
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise PromptLogprobsError(f"prompt_logprobs row {index} holds no log-prob: {row!r}")
        values.append(float(value))
    return values


# Below this temperature both engines sample greedily (vLLM's and SGLang's own epsilon).
GREEDY_TEMPERATURE = 1e-5


def sampled_logprobs_on_prompt_scale(
    sampling_params: Mapping[str, Any], engine: str | None, logprobs_mode: str | None = None
) -> bool:
    """Whether the log-probs an engine reports for sampled tokens are the raw temperature-1 log-softmax, the scale of
    its prompt log-probs, so that one scoring request (the purified context) suffices.

    - Penalties (repetition, frequency, presence) change the logits before either engine's sampled log-probs
      (vLLM's `raw_logprobs` mode alone takes them before): never raw.
    - `sglang`: `log softmax(logits / T)` taken before top-k/top-p/min-p (its sampler computes `log(probs)` before
      truncating), and greedy requests are rewritten to T = 1, top-k = 1: raw at T = 1 with any truncation, and
      greedy.
    - `vllm` with verl's default `logprobs_mode=processed_logprobs` (and every other backend, e.g. `cpu`): after
      temperature and top-k/top-p; a greedy row is left unscaled (in a mixed batch it still gets its own
      top-k/top-p): raw at T = 1 or greedy, without top-k/top-p/min-p. With `raw_logprobs`: always raw.
    Absent keys are the engines' defaults (all off)."""

    def value(key: str, default: float) -> float:
        raw = sampling_params.get(key)
        return default if raw is None else float(raw)

    temperature = value("temperature", 1.0)
    greedy = temperature < GREEDY_TEMPERATURE
    if engine == "vllm" and logprobs_mode == "raw_logprobs":
        return True
    penalised = (
        value("repetition_penalty", 1.0) != 1.0
        or value("frequency_penalty", 0.0) != 0.0
        or value("presence_penalty", 0.0) != 0.0
    )
    if penalised or not (greedy or temperature == 1.0):
        return False
    if engine == "sglang":
        return True
    return value("top_p", 1.0) >= 1.0 and value("top_k", -1) <= 0 and value("min_p", 0.0) <= 0.0


def logprobs_at(token_logprobs: Sequence[float], indices: Sequence[int]) -> list[float]:
    """The log-probs of the prompt tokens at `indices` (each >= 1: the first token has none)."""
    if any(not 1 <= index < len(token_logprobs) for index in indices):
        raise ValueError(f"token indices {list(indices)} are not scorable in a prompt of {len(token_logprobs)} tokens")
    return [token_logprobs[index] for index in indices]


def gate(score: IsScore, threshold: float, kind: IsStatistic = "sequence") -> IsDecision:
    """Plan B: append (keep the failure) when the statistic is below log τ, else replace.

    The sum is compared in log space (no overflow); the clamped mean as the reference code does, exp(mean) < τ.
    """
    value = score.statistic(kind)
    below = value < math.log(threshold) if kind == "sequence" else math.exp(value) < threshold
    return "append" if below else "replace"
