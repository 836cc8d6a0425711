"""Token-in/token-out batched sampling with a transformers causal LM on CPU.

One call decodes a batch of prompts together: left-padded prefill, then one token per step for every
unfinished row through a shared KV cache; finished rows are dropped from the cache so the batch shrinks.
Each row has its own sampling settings and its own random generator (seeded per request when a seed is
given), so the result of a request does not depend on what it was batched with.

Log-probs are those of the sampled token under the temperature-scaled distribution before top-k/top-p
filtering: the quantity verl's actor recomputes (`logits / temperature`, full vocabulary), so rollout and
actor log-probs are comparable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


@dataclass
class SamplingRequest:
    """One generation request: where to start, how to sample, when to stop."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("empty prompt: a generation request needs at least one prompt token")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


@dataclass
class SamplingResult:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str


def _filtered_probs(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Probabilities of the scaled logits after top-k and nucleus (top-p) filtering."""
    logits = scaled
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def _sample_row(logits: torch.Tensor, request: SamplingRequest, generator: torch.Generator) -> tuple[int, float]:
    if request.temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    scaled = logits / request.temperature
    probs = _filtered_probs(scaled, request.top_k, request.top_p)
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(torch.log_softmax(scaled, dim=-1)[token])


def _generator(request: SamplingRequest, fallback: torch.Generator) -> torch.Generator:
    if request.seed is None:
        seed = int(torch.randint(0, 2**62, (1,), generator=fallback))
    else:
        seed = request.seed
    return torch.Generator().manual_seed(seed)


@torch.inference_mode()
def generate_batch(
    model: torch.nn.Module, requests: list[SamplingRequest], pad_id: int, rng: torch.Generator
) -> list[SamplingResult]:
    """Sample a continuation for every request; `rng` seeds the requests that carry no seed of their own."""
    from transformers import DynamicCache

    generators = [_generator(request, rng) for request in requests]
    longest = max(len(request.prompt_ids) for request in requests)
    input_ids = torch.full((len(requests), longest), pad_id, dtype=torch.long)
    attention = torch.zeros((len(requests), longest), dtype=torch.long)
    for row, request in enumerate(requests):
        input_ids[row, longest - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
        attention[row, longest - len(request.prompt_ids) :] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = (
        model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions, past_key_values=cache, use_cache=True
        )
        .logits[:, -1, :]
        .float()
    )

    results = [SamplingResult([], [], FINISH_LENGTH) for _ in requests]
    live = list(range(len(requests)))  # request index of each cache row
    next_position = positions[:, -1] + 1
    while True:
        tokens = []
        still_live = []
        for cache_row, index in enumerate(live):
            request, result = requests[index], results[index]
            token, log_prob = _sample_row(logits[cache_row], request, generators[index])
            result.token_ids.append(token)
            result.log_probs.append(log_prob)
            if token in request.stop_token_ids:
                result.finish_reason = FINISH_STOP
            elif len(result.token_ids) < request.max_tokens:
                still_live.append(cache_row)
            tokens.append(token)
        if not still_live:
            return results
        if len(still_live) < len(live):
            keep = torch.tensor(still_live)
            cache.batch_select_indices(keep)
            attention, next_position = attention[keep], next_position[keep]
            tokens = [tokens[row] for row in still_live]
            live = [live[row] for row in still_live]
        attention = torch.cat([attention, torch.ones((len(live), 1), dtype=torch.long)], dim=-1)
        logits = (
            model(
                input_ids=torch.tensor(tokens).unsqueeze(-1),
                attention_mask=attention,
                position_ids=next_position.unsqueeze(-1),
                past_key_values=cache,
                use_cache=True,
            )
            .logits[:, -1, :]
            .float()
        )
        next_position = next_position + 1
