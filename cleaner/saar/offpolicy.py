"""How far off-policy a splice is: the importance ratio of the spliced tokens, and the Plan B gate on it.

Every token SAAR splices in was sampled by pi(. | a context that still held the failed attempt and its error)
(the behaviour policy); after purification it is trained as if sampled in the purified context. For the spliced
tokens t_1..t_n of one replacement,

    log IS = sum_i log pi(t_i | purified context, t_<i) - sum_i log pi_b(t_i | error context, t_<i),

the sequence-level ratio the reference authors gate on ("Plan B"): below `rollback_is_threshold` the failure is
kept (append), at or above it the retry is spliced in (replace). See docs/saar.md, "Off-policy spans".

The scores come from the inference server through verl's `generate` contract: sampling parameters with
`prompt_logprobs=0` and `max_tokens=1` return `extra_fields["prompt_logprobs"]`, one row per prompt token, row i
holding `[log-prob of token i+1]` and the last row a dummy (the first token has no log-prob).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cleaner.saar.stats import IsDecision

PROMPT_LOGPROBS_KEY = "prompt_logprobs"


class PromptLogprobsError(ValueError):
    """The inference server's answer does not carry usable prompt log-probs."""


@dataclass(frozen=True)
class IsScore:
    log_ratio: float  # sum of log pi(spliced | purified) minus sum of behaviour log-probs
    tokens: int  # spliced tokens scored


def scoring_params(sampling_params: Mapping[str, Any]) -> dict[str, Any]:
    """The trajectory's own sampling parameters, asking for one token and the log-prob of every prompt token.

    The behaviour log-probs were reported under the same parameters, so the two sides are computed alike on a
    backend that applies them to log-probs (vLLM reports raw log-probs for both).
    """
    return {**sampling_params, "max_tokens": 1, PROMPT_LOGPROBS_KEY: 0}


def prompt_token_logprobs(extra_fields: Mapping[str, Any] | None, prompt_length: int) -> list[float]:
    """Per prompt token, the log-prob the server gave it (index 0, the first token, has none: NaN)."""
    rows = (extra_fields or {}).get(PROMPT_LOGPROBS_KEY)
    if rows is None:
        raise PromptLogprobsError("the server returned no extra_fields['prompt_logprobs']")
    if len(rows) != prompt_length:
        raise PromptLogprobsError(f"the server returned {len(rows)} prompt_logprobs rows for {prompt_length} tokens")
    values = [math.nan]
    for index, row in enumerate(rows[:-1]):  # row i scores token i + 1; the last row is a dummy
        value = row[0] if isinstance(row, Sequence) and not isinstance(row, str) and row else row
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            raise PromptLogprobsError(f"prompt_logprobs row {index} holds no log-prob: {row!r}")
        values.append(float(value))
    return values


def span_log_prob(token_logprobs: Sequence[float], start: int, end: int) -> float:
    """Sum of the log-probs of prompt tokens [start, end) (start >= 1: the first token has none)."""
    if not 1 <= start <= end <= len(token_logprobs):
        raise ValueError(f"span [{start}, {end}) is not scorable in a prompt of {len(token_logprobs)} tokens")
    return math.fsum(token_logprobs[start:end])


def gate(log_ratio: float, threshold: float) -> IsDecision:
    """Plan B: append (keep the failure) when IS < threshold, else replace. Compared in log space (no overflow)."""
    return "append" if log_ratio < math.log(threshold) else "replace"
