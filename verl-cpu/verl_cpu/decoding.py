"""Continuous batching over a transformers causal LM: rows decoded together through one shared KV cache.

A `DecodingBatch` prefills new requests (left-padded, past their cached prefix, LM head for the last prompt
position only) and merges them into the running batch; each step samples one token for every row, drops the
rows that finished and decodes the next token of the others. A request that arrives while others decode joins
at the next step instead of waiting for the slowest row. Rows with different cached lengths share one batch:
each row's cached keys and values are left-padded to the longest, its new tokens to the longest suffix, the
padding is masked out and every row has its own position ids, so a row's logits are those of its own tokens
only. A request that asks for prompt log-probs is prefilled whole with all positions' logits
(`prompt_logprobs.score_prompt`) and then decodes like any other row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .prefix_cache import KeysValues, PrefixCache
from .prompt_logprobs import score_prompt
from .sampling import FINISH_LENGTH, FINISH_STOP, SamplingRequest, SamplingResult, row_generator, sample_row

if TYPE_CHECKING:
    from transformers import DynamicCache


def _padded_cache(pasts: list[KeysValues | None], lengths: list[int], width: int) -> DynamicCache:
    """One batch cache from the rows' cached keys and values, each left-padded with zeros to `width` tokens."""
    from transformers import DynamicCache

    sample = next(past for past in pasts if past is not None)
    layers = []
    for layer, (keys, values) in enumerate(sample):
        batch_keys = keys.new_zeros((len(pasts), keys.shape[1], width, keys.shape[3]))
        batch_values = values.new_zeros((len(pasts), values.shape[1], width, values.shape[3]))
        for row, past in enumerate(pasts):
            if past is not None:
                batch_keys[row, :, width - lengths[row] :] = past[layer][0][0]
                batch_values[row, :, width - lengths[row] :] = past[layer][1][0]
        layers.append((batch_keys, batch_values))
    return DynamicCache(ddp_cache_data=layers)


def _left_padded(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """`tensor` with zero columns prepended along its token dimension (-1 for masks, -2 for keys/values)."""
    if tensor.dim() == 2:
        return torch.nn.functional.pad(tensor, (width - tensor.shape[-1], 0))
    return torch.nn.functional.pad(tensor, (0, 0, width - tensor.shape[-2], 0))


@dataclass
class _Row:
    ticket: object  # the caller's handle for this request, returned with its result
    request: SamplingRequest
    generator: torch.Generator
    source: int | None  # the prefix-cache entry the prompt was continued from
    result: SamplingResult


class DecodingBatch:
    """Rows decoded together, one token per row and step; new requests join between steps (continuous batching).

    Columns of the shared cache are [padding][each row's tokens], left-aligned per row: a row's padding is
    masked out and its position ids are its own, so its logits are those of its own tokens whatever it is
    batched with. `admit` prefills new requests (past their cached prefix) and merges them into the batch;
    `step` samples a token for every row, hands back the rows that finished and decodes the next token of
    the others. A request arriving while others decode starts at the next step instead of waiting for the
    slowest row of the batch to finish."""

    def __init__(self, model: torch.nn.Module, pad_id: int, prefix_cache: PrefixCache | None = None) -> None:
        self.model = model
        self.pad_id = pad_id
        self.prefix_cache = prefix_cache
        self._empty()

    def _empty(self) -> None:
        self._rows: list[_Row] = []
        self._cache: DynamicCache | None = None
        self._attention = torch.zeros((0, 0), dtype=torch.long)
        self._next_position = torch.zeros(0, dtype=torch.long)
        self._logits: torch.Tensor | None = None  # [rows, vocabulary]: each row's next-token logits

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def width(self) -> int:
        """Columns of the shared cache: the longest row's tokens plus the padding the others carry."""
        return self._attention.shape[1]

    @torch.inference_mode()
    def admit(self, tickets_and_requests: list[tuple[object, SamplingRequest]], rng: torch.Generator) -> None:
        """Prefill the requests' prompts and add them to the batch; `rng` seeds those without a seed."""
        plain = []
        for ticket, request in tickets_and_requests:
            if request.prompt_logprobs is None:
                plain.append((ticket, request))
            else:
                self._admit_scored(ticket, request, rng)
        if plain:
            self._admit_prefilled(plain, rng)

    def _admit_scored(self, ticket: object, request: SamplingRequest, rng: torch.Generator) -> None:
        """Prefill a prompt whole, keeping the log-probs of its tokens (no cached prefix: those need logits)."""
        cache, logits, scored = score_prompt(self.model, request.prompt_ids, request.prompt_logprobs)
        length = len(request.prompt_ids)
        result = SamplingResult([], [], FINISH_LENGTH, prompt_ids=scored.ids, prompt_logprobs=scored.logprobs)
        row = _Row(ticket, request, row_generator(request, rng), None, result)
        self._merge([row], cache, torch.ones((1, length), dtype=torch.long), torch.tensor([length]), logits)

    def _admit_prefilled(
        self, tickets_and_requests: list[tuple[object, SamplingRequest]], rng: torch.Generator
    ) -> None:
        """Prefill the prompts together past their cached prefixes, the LM head on the last position only."""
        from transformers import DynamicCache

        requests = [request for _, request in tickets_and_requests]
        reused, pasts, sources = [], [], []
        for request in requests:
            found = self.prefix_cache.take(request.prompt_ids) if self.prefix_cache is not None else (0, None, None)
            reused.append(found[0])
            pasts.append(found[1])
            sources.append(found[2])
        past_width = max(reused)
        suffix_width = max(len(request.prompt_ids) - length for request, length in zip(requests, reused, strict=True))
        input_ids = torch.full((len(requests), suffix_width), self.pad_id, dtype=torch.long)
        # Columns: [cached keys/values, left-padded to past_width][new prompt tokens, left-padded to suffix_width].
        attention = torch.zeros((len(requests), past_width + suffix_width), dtype=torch.long)
        for row, (request, length) in enumerate(zip(requests, reused, strict=True)):
            suffix = request.prompt_ids[length:]
            input_ids[row, suffix_width - len(suffix) :] = torch.tensor(suffix)
            attention[row, past_width - length : past_width] = 1
            attention[row, past_width + suffix_width - len(suffix) :] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, past_width:]
        cache = _padded_cache(pasts, reused, past_width) if past_width else DynamicCache()
        del pasts
        logits = (
            self.model(
                input_ids=input_ids,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            .logits[:, -1, :]
            .float()
        )
        rows = [
            _Row(ticket, request, row_generator(request, rng), source, SamplingResult([], [], FINISH_LENGTH))
            for (ticket, request), source in zip(tickets_and_requests, sources, strict=True)
        ]
        self._merge(rows, cache, attention, positions[:, -1] + 1, logits)

    def _merge(
        self,
        rows: list[_Row],
        cache: DynamicCache,
        attention: torch.Tensor,
        next_position: torch.Tensor,
        logits: torch.Tensor,
    ) -> None:
        if not self._rows:
            self._rows, self._cache, self._attention = rows, cache, attention
            self._next_position, self._logits = next_position, logits
            return
        from transformers import DynamicCache

        width = max(self._attention.shape[1], attention.shape[1])

        def stacked(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
            return torch.cat([_left_padded(mine, width), _left_padded(theirs, width)])

        layers = [
            (stacked(old.keys, new.keys), stacked(old.values, new.values))
            for old, new in zip(self._cache.layers, cache.layers, strict=True)
        ]
        self._cache = DynamicCache(ddp_cache_data=layers)
        self._attention = torch.cat([_left_padded(self._attention, width), _left_padded(attention, width)])
        self._next_position = torch.cat([self._next_position, next_position])
        self._logits = torch.cat([self._logits, logits])
        self._rows = self._rows + rows

    @torch.inference_mode()
    def step(self) -> list[tuple[object, SamplingResult]]:
        """Sample one token for every row; returns (ticket, result) of the rows that finished with it."""
        finished, still_live, tokens = [], [], []
        for index, row in enumerate(self._rows):
            token, log_prob = sample_row(self._logits[index], row.request, row.generator)
            row.result.token_ids.append(token)
            row.result.log_probs.append(log_prob)
            if token in row.request.stop_token_ids:
                row.result.finish_reason = FINISH_STOP
            elif len(row.result.token_ids) < row.request.max_tokens:
                still_live.append(index)
                tokens.append(token)
                continue
            if self.prefix_cache is not None:
                # The cache holds the prompt and every sampled token but this last one (never fed to the model).
                processed = row.request.prompt_ids + row.result.token_ids[:-1]
                self.prefix_cache.put(processed, _row_keys_values(self._cache, index, self._attention), row.source)
            finished.append((row.ticket, row.result))
        if len(still_live) < len(self._rows):
            self._keep(still_live)
        if self._rows:
            self._decode(tokens)
        return finished

    def _keep(self, rows: list[int]) -> None:
        if not rows:
            self._empty()
            return
        keep = torch.tensor(rows)
        self._rows = [self._rows[row] for row in rows]
        self._cache.batch_select_indices(keep)
        self._attention, self._next_position = self._attention[keep], self._next_position[keep]
        # Columns that are padding in every row left (the departed rows were the longest): cut them.
        first = int(self._attention.any(dim=0).nonzero()[0])
        if first:
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
            self._attention = self._attention[:, first:]

    def _decode(self, tokens: list[int]) -> None:
        self._attention = torch.cat([self._attention, torch.ones((len(tokens), 1), dtype=torch.long)], dim=-1)
        self._logits = (
            self.model(
                input_ids=torch.tensor(tokens).unsqueeze(-1),
                attention_mask=self._attention,
                position_ids=self._next_position.unsqueeze(-1),
                past_key_values=self._cache,
                use_cache=True,
            )
            .logits[:, -1, :]
            .float()
        )
        self._next_position = self._next_position + 1


def _row_keys_values(cache: DynamicCache, row: int, attention: torch.Tensor) -> KeysValues:
    """The keys and values of one cache row's real (unmasked) tokens, copied out of the batch."""
    keep = attention[row].nonzero().squeeze(-1)
    return [(layer.keys[row : row + 1, :, keep], layer.values[row : row + 1, :, keep]) for layer in cache.layers]


def generate_batch(
    model: torch.nn.Module,
    requests: list[SamplingRequest],
    pad_id: int,
    rng: torch.Generator,
    prefix_cache: PrefixCache | None = None,
) -> list[SamplingResult]:
    """Sample a continuation for every request, all decoded together; `rng` seeds the requests without a seed.

    With `prefix_cache`, every request reuses the cached keys and values of its prompt's longest cached prefix
    and leaves those of its prompt and sampled tokens behind for the next turn."""
    batch = DecodingBatch(model, pad_id, prefix_cache)
    batch.admit(list(enumerate(requests)), rng)
    results: dict[object, SamplingResult] = {}
    while batch:
        results.update(batch.step())
    return [results[index] for index in range(len(requests))]
