"""Keys and values of the sequences the rollout server has processed, reused by later prompts that extend them.

Every turn of a multi-turn trajectory sends the whole conversation again (the previous prompt, the tokens
sampled, the tool response). A finished row leaves the keys and values of the tokens it processed; a later
request reuses those of the entry that shares the longest prefix with its prompt (a rolled-back prompt shares
only a part) and prefills only the rest. Entries are matched by their tokens, not by a request id: verl's
server manager sends every turn with a fresh request id.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

KeysValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values [1, kv heads, tokens, head dim]


@dataclass
class _Entry:
    tokens: torch.Tensor
    layers: KeysValues
    nbytes: int


class PrefixCache:
    """Keys and values of the token sequences the sampler has processed, for later prompts that extend them.

    `take(prompt)` finds the entry sharing the longest prefix with the prompt; `put` stores a finished row's
    tokens and drops the entry it grew from when the new one extends it whole (the old one can only match
    less). Entries are evicted least recently used first beyond `max_bytes` or `max_entries`, and all go at
    `clear()` (the owner calls it when the weights change: keys and values of the old policy would make the
    next turn sample from a mixture). Thread-safe: the server's batches run in a worker thread while its event
    loop may clear the cache."""

    def __init__(self, max_bytes: int, max_entries: int = 256) -> None:
        if max_bytes < 1 or max_entries < 1:
            raise ValueError(f"prefix cache bounds must be positive, got {max_bytes} bytes, {max_entries} entries")
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_id = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = {"lookups": 0, "hits": 0, "reused_tokens": 0, "evictions": 0}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def take(self, prompt_ids: list[int]) -> tuple[int, KeysValues | None, int | None]:
        """How many leading prompt tokens the best entry covers, their keys and values, and the entry's id.

        At least the last prompt token is always left to compute (its logits give the first new token)."""
        prompt = torch.tensor(prompt_ids)
        with self._lock:
            self.stats["lookups"] += 1
            best, best_id = 0, None
            for entry_id, entry in self._entries.items():
                limit = min(len(entry.tokens), len(prompt) - 1)
                common = int((entry.tokens[:limit] == prompt[:limit]).cumprod(0).sum())
                if common > best:
                    best, best_id = common, entry_id
            if best_id is None:
                return 0, None, None
            self._entries.move_to_end(best_id)
            self.stats["hits"] += 1
            self.stats["reused_tokens"] += best
            layers = self._entries[best_id].layers
        return best, [(keys[:, :, :best], values[:, :, :best]) for keys, values in layers], best_id

    def put(self, tokens: list[int], layers: KeysValues, grown_from: int | None = None) -> None:
        """Store `tokens` with their keys and values; `grown_from` is the entry their prompt reused."""
        new = torch.tensor(tokens)
        nbytes = sum(keys.nbytes + values.nbytes for keys, values in layers)
        with self._lock:
            source = self._entries.get(grown_from) if grown_from is not None else None
            if (
                source is not None
                and len(source.tokens) <= len(new)
                and torch.equal(source.tokens, new[: len(source.tokens)])
            ):
                del self._entries[grown_from]
                self._bytes -= source.nbytes
            if nbytes > self.max_bytes:
                return
            self._entries[self._next_id] = _Entry(new, layers, nbytes)
            self._next_id += 1
            self._bytes += nbytes
            while self._bytes > self.max_bytes or len(self._entries) > self.max_entries:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes
                self.stats["evictions"] += 1
