"""The CPU rollout server: verl's token-in/token-out `generate()` over a transformers model, one Ray actor.

verl's agent loops call `await server.generate.remote(request_id=, prompt_ids=, sampling_params=, ...)`
concurrently (one call per turn of every trajectory). They share one `decoding.DecodingBatch`: calls that
arrive while it decodes join it at the next decoding step (up to `rollout.max_num_seqs` rows), so a trajectory
back from its tool call does not wait for the slowest row of the others' turns. A weight sync
(`begin_weight_update`, `load_weights` per bucket, `finish_weight_update`) waits until the batch has drained
(no new rows join meanwhile) and replaces the weights before any other row starts: the trainer pushes the
actor's weights through verl's weight-sync path after every step, so every row samples from the current policy.

Prefix cache (`prefix_cache.PrefixCache`, on unless `engine_kwargs.cpu.prefix_cache: false`): each turn
of a trajectory sends the conversation so far (the last prompt, the tokens sampled, the tool response), so the
server keeps the keys and values of what it processed and prefills only the new tokens of the next turn.
Entries are matched by tokens: verl's server manager gives every turn a fresh request id.
It is emptied when a weight sync begins (keys and values of the old weights would make the next turn
off-policy) and when verl puts the replica to sleep or clears its KV cache (after every rollout: none of its
trajectories comes back). The other sleep/wake calls of verl's replica protocol have no CPU meaning (no device
memory to free) and return at once.

Decoding steps use weight-major matrix products (`weight_major`, on unless
`engine_kwargs.cpu.weight_major_matmul: false`): about 30 % less time per step of 8 rows.

Prompt log-probs: `sampling_params["prompt_logprobs"]` (0 or k) returns `extra_fields["prompt_ids"]` and
`extra_fields["prompt_logprobs"]` in the layout of verl's vLLM and SGLang servers (`prompt_logprobs.py`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

from .decoding import DecodingBatch
from .prefix_cache import PrefixCache
from .sampling import FINISH_STOP, SamplingRequest
from .weight_major import use_weight_major_matmul

logger = logging.getLogger(__name__)

# Sampling keys verl sends that need nothing here: sampled tokens' log-probs are always returned, and no text
# is ever produced (verl's teacher sends detokenize=False with prompt_logprobs).
_ACCEPTED_AND_IGNORED = {"logprobs", "detokenize"}
ENGINE_KWARGS_KEY = "cpu"
_ENGINE_KWARGS = {"max_new_tokens", "prefix_cache", "prefix_cache_mb", "weight_major_matmul"}
PREFIX_CACHE_MB = 1024  # default bound; the 0.5B model's keys and values take 24 KB per token in float32
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def rollout_dtype(name: str) -> torch.dtype:
    """The torch dtype for `rollout.dtype`; float16 has no fast CPU kernels, so it is refused."""
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(
            f"actor_rollout_ref.rollout.dtype={name!r} is not usable on CPU: use float32 (or bfloat16)"
        ) from None


def sampling_request(
    prompt_ids: list[int],
    sampling_params: dict[str, Any],
    prompt_length: int,
    response_length: int,
    eos_ids: set[int],
    max_new_tokens: int | None = None,
) -> SamplingRequest:
    """Map verl's sampling_params (vLLM names) to a SamplingRequest; unknown keys are an error, not ignored.

    `max_new_tokens` (engine_kwargs.cpu.max_new_tokens) caps every turn: verl's agent loops send no
    per-turn limit, and on CPU a short turn budget is what keeps a multi-turn step affordable."""
    params = dict(sampling_params)
    max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
    if max_tokens is None:
        # As verl's vLLM server: cap by response_length and by what is left of prompt + response length.
        max_tokens = min(response_length, prompt_length + response_length - len(prompt_ids))
    if max_new_tokens is not None:
        max_tokens = min(max_tokens, max_new_tokens)
    max_tokens = max(1, int(max_tokens))
    stop_ids = set(params.pop("stop_token_ids", None) or ())
    if not params.pop("ignore_eos", False):
        stop_ids |= eos_ids
    repetition_penalty = float(params.pop("repetition_penalty", 1.0))
    if repetition_penalty != 1.0:
        raise ValueError(f"repetition_penalty={repetition_penalty} is not supported by the CPU rollout (use 1.0)")
    top_k = params.pop("top_k", -1)
    prompt_logprobs = params.pop("prompt_logprobs", None)
    request = SamplingRequest(
        prompt_ids=list(prompt_ids),
        max_tokens=max_tokens,
        temperature=float(params.pop("temperature", 1.0)),
        top_p=float(params.pop("top_p", 1.0)),
        top_k=-1 if top_k is None else int(top_k),
        stop_token_ids=frozenset(stop_ids),
        seed=params.pop("seed", None),
        prompt_logprobs=None if prompt_logprobs is None else int(prompt_logprobs),
    )
    unknown = set(params) - _ACCEPTED_AND_IGNORED
    if unknown:
        raise ValueError(f"CPU rollout: unsupported sampling parameters {sorted(unknown)}")
    return request


def _switch(engine_kwargs: dict[str, Any], name: str) -> bool:
    """An on/off engine kwarg, on by default; anything but true or false is refused (a string "false" is truthy)."""
    value = engine_kwargs.get(name, True)
    if not isinstance(value, bool):
        raise ValueError(f"engine_kwargs.{ENGINE_KWARGS_KEY}.{name} must be true or false, not {value!r}")
    return value


def _fail(futures: Iterable[asyncio.Future], exc: Exception) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)


class CpuGenerationServer:
    """Generation server of one CPU rollout replica (wrapped with `ray.remote` by the replica)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int, max_batch_size: int) -> None:
        self.config = config
        self.model_config = model_config
        self.replica_rank = replica_rank
        self.max_batch_size = max_batch_size
        engine_kwargs = dict(getattr(config, "engine_kwargs", None) or {}).get(ENGINE_KWARGS_KEY) or {}
        unknown = set(engine_kwargs) - _ENGINE_KWARGS
        if unknown:
            raise ValueError(
                f"engine_kwargs.{ENGINE_KWARGS_KEY}: unknown keys {sorted(unknown)} (known: {sorted(_ENGINE_KWARGS)})"
            )
        self.max_new_tokens = engine_kwargs.get("max_new_tokens")
        self.prefix_cache: PrefixCache | None = None
        if _switch(engine_kwargs, "prefix_cache"):
            self.prefix_cache = PrefixCache(int(float(engine_kwargs.get("prefix_cache_mb", PREFIX_CACHE_MB)) * 2**20))
        self.weight_major_matmul = _switch(engine_kwargs, "weight_major_matmul")
        self.model: torch.nn.Module | None = None
        self.weights_step: int | None = None
        self._pending: list[tuple[SamplingRequest, asyncio.Future]] = []
        self._model_lock = asyncio.Lock()
        self._syncing = False
        self._sync_waiting = False
        self._broken: str | None = None
        self._batch_task: asyncio.Task | None = None
        self._rng = torch.Generator().manual_seed(int(getattr(config, "seed", 0)) + replica_rank)
        self._eos_ids: set[int] = set()
        self.stats = {"prefills": 0, "requests": 0, "generated_tokens": 0, "generate_seconds": 0.0, "weight_syncs": 0}

    async def launch(self) -> None:
        """Load the model from `model.path` (the trainer then overwrites its weights before the first rollout)."""
        from transformers import AutoModelForCausalLM, GenerationConfig
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        self.model_config = omega_conf_to_dataclass(self.model_config, dataclass_type=HFModelConfig)
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        path = self.model_config.local_path
        dtype = rollout_dtype(self.config.dtype)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
        if self.weight_major_matmul:
            use_weight_major_matmul(self.model)
        layer_types = set(getattr(self.model.config, "layer_types", None) or ["full_attention"])
        if self.prefix_cache is not None and layer_types != {"full_attention"}:
            # The cache is rebuilt from plain per-layer tensors; sliding-window layers would need their own layout.
            logger.warning("CPU rollout: prefix cache off, the model has %s attention layers", sorted(layer_types))
            self.prefix_cache = None
        tokenizer = self.model_config.tokenizer
        eos = {tokenizer.eos_token_id}
        try:
            generation_eos = GenerationConfig.from_pretrained(path).eos_token_id
        except OSError:
            generation_eos = None
        if generation_eos is not None:
            eos |= set(generation_eos) if isinstance(generation_eos, list) else {generation_eos}
        self._eos_ids = {token for token in eos if token is not None}
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._eos_ids)
        logger.info("CPU rollout replica %d: %s loaded as %s", self.replica_rank, path, dtype)

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        **_routing: Any,
    ) -> TokenOutput:
        if self._broken:
            raise RuntimeError(self._broken)
        if image_data or video_data or audio_data:
            raise ValueError("the CPU rollout is text-only: image, video and audio inputs are not supported")
        request = sampling_request(
            prompt_ids,
            sampling_params,
            self.config.prompt_length,
            self.config.response_length,
            self._eos_ids,
            self.max_new_tokens,
        )
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._batch_task is None or self._batch_task.done():
            self._batch_task = asyncio.create_task(self._run_batches())
        result = await future
        extra_fields: dict[str, Any] = {"global_steps": self.weights_step}
        if request.prompt_logprobs is not None:
            extra_fields["prompt_ids"] = result.prompt_ids
            extra_fields["prompt_logprobs"] = result.prompt_logprobs
        return TokenOutput(
            token_ids=result.token_ids,
            log_probs=result.log_probs,
            stop_reason="completed" if result.finish_reason == FINISH_STOP else None,
            extra_fields=extra_fields,
        )

    async def _run_batches(self) -> None:
        while self._pending:
            # Let the calls issued in the same event-loop turn (a wave of agent-loop turns) start together.
            await asyncio.sleep(0.01)
            async with self._model_lock:
                await self._decode_until_drained()

    async def _decode_until_drained(self) -> None:
        """Decode step by step, letting waiting requests join between steps, until no row is left.

        A weight sync that is waiting (`_sync_waiting`) stops new requests from joining, so the batch drains
        and the sync gets the model; the requests still waiting start after it, with the new weights."""
        batch = DecodingBatch(self.model, self._pad_id, self.prefix_cache)
        live: set[asyncio.Future] = set()
        while batch or (self._pending and not self._sync_waiting):
            room = self.max_batch_size - len(batch)
            if self._pending and room > 0 and not self._sync_waiting:
                joining, self._pending = self._pending[:room], self._pending[room:]
                futures = [future for _, future in joining]
                try:
                    await self._in_thread(batch.admit, [(future, request) for request, future in joining], self._rng)
                except Exception as exc:  # these callers get the failure, none hangs; the rows decoding go on
                    _fail(futures, exc)
                    continue
                live.update(futures)
                self.stats["prefills"] += 1  # groups of requests prefilled together
                self.stats["requests"] += len(joining)
            try:
                finished = await self._in_thread(batch.step)
            except Exception as exc:  # a failed step leaves the batch's state unknown: all of its rows fail
                _fail(live, exc)
                live.clear()
                batch = DecodingBatch(self.model, self._pad_id, self.prefix_cache)
                continue
            for future, result in finished:
                live.discard(future)
                self.stats["generated_tokens"] += len(result.token_ids)
                if not future.done():  # a caller that was cancelled is not waiting any more
                    future.set_result(result)

    async def _in_thread(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run a batch operation off the event loop (it computes for seconds), counting its time."""
        started = time.perf_counter()
        try:
            return await asyncio.to_thread(call, *args)
        finally:
            self.stats["generate_seconds"] += time.perf_counter() - started

    async def begin_weight_update(self) -> None:
        """Start a weight sync: waits for the running batch, then holds generation until `finish_weight_update`.

        The weights arrive in several `load_weights` calls (buckets, so that the actor never holds a second full
        copy of the model); no batch may sample from a half-updated model in between."""
        self._sync_waiting = True
        try:
            await self._model_lock.acquire()
        finally:
            self._sync_waiting = False
        self._syncing = True
        self._clear_prefix_cache()

    async def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy one bucket of the actor's weights (HF parameter names) into the model."""
        self._require_syncing()
        try:
            self._copy_weights(weights)
        except BaseException as exc:
            await self.abort_weight_update(f"{type(exc).__name__}: {exc}")
            raise

    async def finish_weight_update(self, global_steps: int | None) -> None:
        """End a weight sync: outputs from now on are stamped with `global_steps`, generation resumes."""
        self._require_syncing()
        self.weights_step = global_steps
        self.stats["weight_syncs"] += 1
        self._end_sync()

    async def abort_weight_update(self, reason: str) -> None:
        """A sync that failed halfway leaves a model that is neither policy: refuse to sample from it."""
        self._broken = f"CPU rollout: a weight sync failed halfway ({reason}); the rollout model is unusable"
        if self._syncing:
            self._end_sync()

    def _copy_weights(self, weights: dict[str, torch.Tensor]) -> None:
        state = self.model.state_dict()
        unknown = sorted(set(weights) - set(state))
        if unknown:
            raise KeyError(f"CPU rollout: the actor sent weights the rollout model does not have: {unknown[:5]}")
        with torch.no_grad():
            for name, tensor in weights.items():
                state[name].copy_(tensor)

    def _require_syncing(self) -> None:
        if not self._syncing:
            raise RuntimeError("CPU rollout: weights sent outside begin_weight_update/finish_weight_update")

    def _end_sync(self) -> None:
        self._syncing = False
        self._model_lock.release()

    def _clear_prefix_cache(self) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    async def get_stats(self) -> dict[str, Any]:
        stats = {**self.stats, "weights_step": self.weights_step}
        if self.prefix_cache is not None:
            cache = self.prefix_cache
            stats["prefix_cache"] = {**cache.stats, "entries": len(cache), "bytes": cache.nbytes}
        return stats

    async def sleep(self) -> None:
        """verl calls this after every rollout: no trajectory of it comes back, so their cached prefixes go."""
        self._clear_prefix_cache()

    async def wake_up(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        self._clear_prefix_cache()

    async def release_kv_cache(self) -> None:
        self._clear_prefix_cache()

    async def resume_kv_cache(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None
