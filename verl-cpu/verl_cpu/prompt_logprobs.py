"""Log-probs of a prompt's own tokens, in the layout verl's `generate()` contract gives them.

verl 0.9.1's vLLM and SGLang servers take `prompt_logprobs` in the sampling params and return, in
`extra_fields`, two lists with one row per prompt token: row i holds the log-prob of token i + 1 given tokens
0..i (`prompt_logprobs`) and that token's id (`prompt_ids`); the first token has no context and so no row of
its own, and the last row is a dummy (zeros). With `prompt_logprobs=0` each row holds the prompt token's own
log-prob; with k > 0 it holds the k most likely tokens at that position, best first, whether or not the prompt
token is among them. As in those servers, the log-probs are of the model's raw distribution (the logits at
temperature 1, no top-k/top-p) whatever the request's sampling parameters; they equal the log-probs of sampled
tokens (`sampling.py`) only for a request sampled at temperature 1 without top-k/top-p.

The prompt is run through the model in chunks of `chunk_tokens` positions with a growing KV cache, so the
logits of only one chunk (chunk × vocabulary floats) are held at a time; the cache and the last position's
logits are handed back, and the request then samples its continuation from them like any other row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import DynamicCache

# Positions whose logits are computed at once: 256 × 151,936 float32 logits of a Qwen2.5 model take 156 MB.
SCORE_CHUNK_TOKENS = 256


@dataclass
class PromptLogprobs:
    """verl's `extra_fields["prompt_ids"]` and `extra_fields["prompt_logprobs"]`: one row per prompt token."""

    ids: list[list[int]]
    logprobs: list[list[float]]


@torch.inference_mode()
def score_prompt(
    model: torch.nn.Module,
    prompt_ids: list[int],
    num_logprobs: int,
    chunk_tokens: int = SCORE_CHUNK_TOKENS,
) -> tuple[DynamicCache, torch.Tensor, PromptLogprobs]:
    """Run `prompt_ids` through `model`; returns its KV cache, the last position's logits [1, vocab] (float32)
    and the prompt log-probs (`num_logprobs` 0: each prompt token's own; k > 0: the top k per position)."""
    from transformers import DynamicCache

    if num_logprobs < 0:
        raise ValueError(f"prompt_logprobs must be >= 0, got {num_logprobs}")
    if not prompt_ids:
        raise ValueError("empty prompt: prompt log-probs need at least one prompt token")
    tokens = torch.tensor([prompt_ids])
    cache = DynamicCache()
    ids: list[list[int]] = []
    logprobs: list[list[float]] = []
    last_logits = None
    for start in range(0, len(prompt_ids), chunk_tokens):
        end = min(start + chunk_tokens, len(prompt_ids))
        logits = (
            model(
                input_ids=tokens[:, start:end],
                attention_mask=torch.ones((1, end), dtype=torch.long),
                position_ids=torch.arange(start, end).unsqueeze(0),
                past_key_values=cache,
                use_cache=True,
            )
            .logits[0]
            .float()
        )
        # Position p predicts token p + 1; the prompt's last position predicts no prompt token.
        targets = tokens[0, start + 1 : end + 1]
        log_probs = torch.log_softmax(logits[: targets.numel()], dim=-1)
        if num_logprobs == 0:
            ids += targets.unsqueeze(-1).tolist()
            logprobs += log_probs.gather(-1, targets.unsqueeze(-1)).tolist()
        else:
            top = torch.topk(log_probs, min(num_logprobs, log_probs.shape[-1]), dim=-1)
            ids += top.indices.tolist()
            logprobs += top.values.tolist()
        last_logits = logits[-1:]
    width = max(num_logprobs, 1)
    ids.append([0] * width)
    logprobs.append([0.0] * width)
    return cache, last_logits, PromptLogprobs(ids, logprobs)
