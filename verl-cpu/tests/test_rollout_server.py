"""The CPU rollout's sampler and server with the real tiny Qwen2 model: what verl's agent loops rely on."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import TypeVar

import pytest
import torch
from server_fixtures import GREEDY, SAMPLED, ModelConfig, RolloutConfig
from transformers import AutoModelForCausalLM

from verl_cpu.decoding import DecodingBatch, generate_batch
from verl_cpu.prefix_cache import PrefixCache
from verl_cpu.rollout import CpuServerAdapter
from verl_cpu.sampling import FINISH_LENGTH, FINISH_STOP, SamplingRequest, SamplingResult, draw, filtered_probs
from verl_cpu.server import CpuGenerationServer, rollout_dtype, sampling_request

pytestmark = pytest.mark.slow  # loads a model and runs torch generation: seconds per test
T = TypeVar("T")
BOUND_S = 60.0  # far above any wait here on a loaded 2-core machine; a hang fails naming what it waited for


async def bounded(awaitable: Awaitable[T], what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, BOUND_S)
    except TimeoutError:
        raise AssertionError(f"waited more than {BOUND_S:g} s for {what}") from None


class BatchWatch:
    """What the server's decoding loop does, as events: a call that waits for the model (`model_wanted`), each
    admission into the batch with the weights step it happened at (`admitted_at_step`), decoding steps ended."""

    def __init__(self, server: CpuGenerationServer, monkeypatch):
        loop = asyncio.get_running_loop()
        self.model_wanted = asyncio.Event()
        self.admitted_at_step: list[int | None] = []
        self.admitted = asyncio.Event()
        self._steps_ended = 0
        self._step_ended = asyncio.Condition()
        watch, lock = self, server._model_lock
        real_acquire, real_admit, real_step = lock.acquire, DecodingBatch.admit, DecodingBatch.step

        async def acquire() -> bool:
            if lock.locked():
                watch.model_wanted.set()
            return await real_acquire()

        def admit(batch, rows, rng):
            try:
                return real_admit(batch, rows, rng)
            finally:  # runs in the server's worker thread
                loop.call_soon_threadsafe(watch._on_admit, server.weights_step)

        def step(batch):
            try:
                return real_step(batch)
            finally:
                loop.call_soon_threadsafe(lambda: asyncio.ensure_future(watch._on_step()))

        monkeypatch.setattr(lock, "acquire", acquire)
        monkeypatch.setattr(DecodingBatch, "admit", admit)
        monkeypatch.setattr(DecodingBatch, "step", step)

    def _on_admit(self, weights_step: int | None) -> None:
        self.admitted_at_step.append(weights_step)
        self.admitted.set()

    async def _on_step(self) -> None:
        async with self._step_ended:
            self._steps_ended += 1
            self._step_ended.notify_all()

    async def steps_after(self, count: int) -> None:
        """Return once `count` more decoding steps have ended."""
        async with self._step_ended:
            target = self._steps_ended + count
            await self._step_ended.wait_for(lambda: self._steps_ended >= target)


async def _decoding_call(server, watch: BatchWatch, prompt: list[int], max_tokens: int) -> asyncio.Task:
    """A call that decodes `max_tokens` tokens (no stop), returned once it is in the batch."""
    call = asyncio.create_task(
        server.generate(prompt, {**SAMPLED, "max_tokens": max_tokens, "ignore_eos": True}, request_id="long")
    )
    await bounded(watch.admitted.wait(), "the first call to be admitted into the batch")
    return call


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _prompt(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_a_request_gives_the_same_tokens_alone_and_in_a_batch_of_different_lengths(model, tokenizer):
    short = SamplingRequest(_prompt(tokenizer, "hi"), max_tokens=12, temperature=1.0, seed=7)
    long = SamplingRequest(_prompt(tokenizer, "a much longer prompt " * 8), max_tokens=5, temperature=0.7, seed=3)
    alone = generate_batch(model, [short], pad_id=0, rng=torch.Generator().manual_seed(0))[0]
    together = generate_batch(model, [long, short], pad_id=0, rng=torch.Generator().manual_seed(0))
    assert together[1].token_ids == alone.token_ids
    assert together[1].log_probs == pytest.approx(alone.log_probs, abs=1e-4)
    assert len(together[0].token_ids) == 5 and together[0].finish_reason == FINISH_LENGTH


def test_greedy_log_probs_are_the_model_log_softmax(model, tokenizer):
    prompt = _prompt(tokenizer, "count")
    result = generate_batch(model, [SamplingRequest(prompt, max_tokens=4, temperature=0)], 0, torch.Generator())[0]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + result.token_ids])).logits[0].float()
    expected = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    for step, token in enumerate(result.token_ids):
        assert int(expected[step].argmax()) == token
        assert result.log_probs[step] == pytest.approx(float(expected[step, token]), abs=1e-4)


def test_stop_tokens_end_a_row_and_top_k_1_is_greedy(model, tokenizer):
    prompt = _prompt(tokenizer, "stop here")
    greedy = generate_batch(model, [SamplingRequest(prompt, max_tokens=6, temperature=0)], 0, torch.Generator())[0]
    top1 = generate_batch(
        model, [SamplingRequest(prompt, max_tokens=6, temperature=1.3, top_k=1, seed=1)], 0, torch.Generator()
    )[0]
    assert top1.token_ids == greedy.token_ids
    stop_at = greedy.token_ids[2]
    stopped = generate_batch(
        model,
        [SamplingRequest(prompt, max_tokens=6, temperature=0, stop_token_ids=frozenset({stop_at}))],
        0,
        torch.Generator(),
    )[0]
    assert stopped.token_ids == greedy.token_ids[: greedy.token_ids.index(stop_at) + 1]
    assert stopped.finish_reason == FINISH_STOP


def test_draws_follow_the_distribution_and_never_pick_a_zero_probability_token():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    generator = torch.Generator().manual_seed(0)
    counts = torch.bincount(torch.tensor([draw(probs, generator) for _ in range(20_000)]), minlength=5)
    assert counts[1] == 0 and counts[4] == 0
    assert torch.allclose(counts.double() / 20_000, probs.double(), atol=0.015)
    # Same generator state, same token: a seeded request is reproducible.
    assert [draw(probs, torch.Generator().manual_seed(7)) for _ in range(3)] == [
        draw(probs, torch.Generator().manual_seed(7))
    ] * 3


def _full_sort_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, descending=True)
    drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
    kept = torch.zeros_like(probs).scatter(0, order, sorted_probs.masked_fill(drop, 0.0))
    return kept / kept.sum()


@pytest.mark.parametrize("spread", [0.3, 3.0, 30.0])  # peaked (nucleus in the top 256), medium, flat (full sort)
def test_top_p_over_the_most_likely_candidates_equals_sorting_the_whole_vocabulary(spread):
    logits = torch.randn(151_936, generator=torch.Generator().manual_seed(1)) / spread * 10
    for top_p in (0.6, 0.95):
        assert torch.allclose(filtered_probs(logits, -1, top_p), _full_sort_nucleus(torch.softmax(logits, -1), top_p))


def test_sampling_params_are_mapped_and_bad_ones_refused():
    request = sampling_request(
        [1, 2, 3],
        {"temperature": 0.5, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True},
        prompt_length=8,
        response_length=16,
        eos_ids={9},
        max_new_tokens=4,
    )
    assert (request.temperature, request.top_p, request.max_tokens, request.stop_token_ids) == (0.5, 0.9, 4, {9})
    # Without a per-turn cap: what is left of prompt + response length, as verl's vLLM server computes it.
    assert sampling_request([1] * 20, {}, 8, 16, {9}).max_tokens == 4
    with pytest.raises(ValueError, match="unsupported sampling parameters \\['best_of'\\]"):
        sampling_request([1], {"best_of": 2}, 8, 16, set())
    with pytest.raises(ValueError, match="repetition_penalty"):
        sampling_request([1], {"repetition_penalty": 1.1}, 8, 16, set())
    with pytest.raises(ValueError, match="use float32"):
        rollout_dtype("float16")


async def test_server_batches_concurrent_requests_and_serves_synced_weights(
    make_server, tiny_model_dir, tokenizer, monkeypatch
):
    server = make_server()
    await server.launch()
    prompt = _prompt(tokenizer, "hello")
    outputs = await asyncio.gather(*[server.generate(prompt, dict(GREEDY), request_id=str(i)) for i in range(5)])
    stats = await server.get_stats()
    assert stats["requests"] == 5 and stats["prefills"] == 1  # one forward pass per step for all five
    assert all(len(out.token_ids) == len(out.log_probs) <= 6 for out in outputs)
    assert len({tuple(out.token_ids) for out in outputs}) == 1

    # A weight sync through the trainer-side adapter, in buckets: an all-zero lm_head makes every token equally
    # likely, so greedy decoding then takes token 0 at once.
    adapter = CpuServerAdapter(RolloutConfig(), ModelConfig(tiny_model_dir, tokenizer), None, replica_rank=0)
    adapter._server = _LocalHandle(server)
    monkeypatch.setattr("verl_cpu.rollout.WEIGHT_BUCKET_BYTES", 1)  # one bucket per tensor
    zeros = torch.zeros_like(server.model.lm_head.weight)
    embed = server.model.model.embed_tokens.weight.detach().clone()
    await adapter.update_weights(
        iter([("model.embed_tokens.weight", embed), ("lm_head.weight", zeros)]), global_steps=3
    )
    assert adapter._server.calls == ["begin_weight_update", "load_weights", "load_weights", "finish_weight_update"]
    after = await server.generate(prompt, dict(GREEDY), request_id="after")
    assert set(after.token_ids) == {0} and after.extra_fields["global_steps"] == 3
    assert after.log_probs[0] == pytest.approx(-math.log(zeros.shape[0]), abs=1e-4)


async def test_generation_waits_for_a_weight_sync_and_a_failed_sync_stops_the_server(
    make_server, tiny_model_dir, tokenizer, monkeypatch
):
    server = make_server()
    await server.launch()
    watch = BatchWatch(server, monkeypatch)
    prompt = _prompt(tokenizer, "hello")
    await server.begin_weight_update()
    waiting = asyncio.create_task(server.generate(prompt, dict(GREEDY), request_id="during-sync"))
    await bounded(watch.model_wanted.wait(), "the call to wait for the model behind the sync")
    await server.load_weights({"lm_head.weight": torch.zeros_like(server.model.lm_head.weight)})
    assert not waiting.done() and watch.admitted_at_step == []  # nothing samples from a half-synced model
    await server.finish_weight_update(7)
    output = await bounded(waiting, "the call after the sync")
    assert watch.admitted_at_step == [7] and output.extra_fields["global_steps"] == 7
    assert set(output.token_ids) == {0}  # sampled from the synced all-zero lm_head: every token equally likely

    adapter = CpuServerAdapter(RolloutConfig(), ModelConfig(tiny_model_dir, tokenizer), None, replica_rank=0)
    adapter._server = _LocalHandle(server)
    with pytest.raises(KeyError, match="does not have"):
        await adapter.update_weights(iter([("not.a.weight", torch.zeros(1))]), global_steps=8)
    with pytest.raises(RuntimeError, match="weight sync failed halfway"):
        await server.generate(prompt, dict(GREEDY), request_id="after-failed-sync")


class _LocalHandle:
    """Stands in for the server's Ray actor handle: `handle.method.remote(...)` awaits the real server method."""

    def __init__(self, server: CpuGenerationServer) -> None:
        self._server = server
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        method = getattr(self._server, name)
        calls = self.calls

        class _Method:
            @staticmethod
            def remote(*args, **kwargs):
                calls.append(name)
                return method(*args, **kwargs)

        return _Method


# Prefix cache: every cached run must give what the same request gives decoded alone without a cache.

TOOL_RESPONSE = "<tool_response>\n42\n</tool_response>"


def _run(model, requests: list[SamplingRequest], cache: PrefixCache | None = None) -> list[SamplingResult]:
    return generate_batch(model, requests, 0, torch.Generator().manual_seed(0), cache)


def _greedy(prompt: list[int], max_tokens: int = 8) -> SamplingRequest:
    return SamplingRequest(prompt, max_tokens=max_tokens, temperature=0)


def _assert_as_alone(model, request: SamplingRequest, result: SamplingResult) -> None:
    reference = _run(model, [request])[0]
    assert result.token_ids == reference.token_ids
    assert result.log_probs == pytest.approx(reference.log_probs, abs=1e-4)
    assert result.finish_reason == reference.finish_reason


def _common(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_a_continued_conversation_prefills_only_the_new_tokens_and_samples_the_same(model, tokenizer):
    cache = PrefixCache(max_bytes=2**30)
    prompt = _prompt(tokenizer, "write a function")
    first = _run(model, [_greedy(prompt)], cache)[0]
    assert cache.stats["hits"] == 0 and len(cache) == 1
    tool = tokenizer.encode(TOOL_RESPONSE)
    reused = 0
    for turn in range(2):
        prompt = prompt + first.token_ids + tool
        # The entry holds everything the last call processed: its prompt and its tokens but the last one.
        reused += len(prompt) - len(tool) - 1
        request = _greedy(prompt)
        result = _run(model, [request], cache)[0]
        assert cache.stats["hits"] == turn + 1 and cache.stats["reused_tokens"] == reused
        _assert_as_alone(model, request, result)
        assert len(cache) == 1  # the longer entry replaces the one it grew from
        first = result


@pytest.mark.parametrize("case", ["rollback", "prompt_is_the_cached_tokens", "shorter_prompt", "unrelated_prompt"])
def test_a_rolled_back_prompt_reuses_only_the_common_prefix(model, tokenizer, case):
    cache = PrefixCache(max_bytes=2**30)
    prompt = _prompt(tokenizer, "write a function")
    first = _run(model, [_greedy(prompt)], cache)[0]
    assert len(first.token_ids) == 8
    cached = prompt + first.token_ids[:-1]
    retry = tokenizer.encode("a different retry")
    new_prompt, common, entries = {
        # SAAR cuts a failed code cell out and continues after the turn's first tokens.
        "rollback": (prompt + first.token_ids[:3] + retry, len(prompt) + 3, 2),
        # Nothing new: the last prompt token is computed again, for its logits.
        "prompt_is_the_cached_tokens": (cached, len(cached) - 1, 1),
        "shorter_prompt": (prompt[:5], 4, 2),
        "unrelated_prompt": (retry + prompt, 0, 2),
    }[case]
    request = _greedy(new_prompt)
    result = _run(model, [request], cache)[0]
    assert cache.stats["reused_tokens"] == common and cache.stats["hits"] == (common > 0)
    _assert_as_alone(model, request, result)
    assert len(cache) == entries
    follow_up = _greedy(new_prompt + result.token_ids + retry)
    _assert_as_alone(model, follow_up, _run(model, [follow_up], cache)[0])
    assert cache.stats["reused_tokens"] == common + len(new_prompt) + len(result.token_ids) - 1


def test_batched_rows_with_different_cached_lengths_are_independent(model, tokenizer):
    cache = PrefixCache(max_bytes=2**30)
    long_prompt = _prompt(tokenizer, "a much longer prompt " * 8)
    short_prompt = _prompt(tokenizer, "hi")
    long_first, short_first = _run(model, [_greedy(long_prompt), _greedy(short_prompt, 3)], cache)
    long_cached, short_cached = long_prompt + long_first.token_ids[:-1], short_prompt + short_first.token_ids[:-1]
    tool = tokenizer.encode(TOOL_RESPONSE)
    fresh = _prompt(tokenizer, "fresh")  # shares only the chat template's opening with the cached rows
    requests = [
        _greedy(long_cached + long_first.token_ids[-1:] + tool, max_tokens=4),
        SamplingRequest(short_cached + short_first.token_ids[-1:] + tool, 10, temperature=1.0, seed=5),
        SamplingRequest(fresh, 6, temperature=0.8, top_p=0.9, seed=9),
    ]
    results = _run(model, requests, cache)
    fresh_common = max(_common(fresh, long_cached), _common(fresh, short_cached))
    assert 0 < fresh_common < len(fresh) - 1 and cache.stats["hits"] == 3
    assert cache.stats["reused_tokens"] == len(long_cached) + len(short_cached) + fresh_common
    for request, result in zip(requests, results, strict=True):
        _assert_as_alone(model, request, result)
    assert len(cache) == 3


def test_rows_with_the_same_prompt_each_continue_from_their_own_tokens(model, tokenizer):
    cache = PrefixCache(max_bytes=2**30)
    prompt = _prompt(tokenizer, "one problem, a group of samples")
    firsts = _run(model, [SamplingRequest(prompt, 8, temperature=1.0, seed=seed) for seed in (1, 2)], cache)
    assert firsts[0].token_ids != firsts[1].token_ids
    tool = tokenizer.encode(TOOL_RESPONSE)
    requests = [SamplingRequest(prompt + first.token_ids + tool, 8, temperature=1.0, seed=3) for first in firsts]
    results = _run(model, list(reversed(requests)), cache)
    assert cache.stats["reused_tokens"] == 2 * len(prompt) + sum(len(first.token_ids) - 1 for first in firsts)
    for request, result in zip(reversed(requests), results, strict=True):
        _assert_as_alone(model, request, result)


def test_the_prefix_cache_is_bounded_and_drops_what_cannot_be_reused():
    def layers(tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.zeros(1, 2, tokens, 4), torch.zeros(1, 2, tokens, 4)) for _ in range(3)]

    entry_bytes = 3 * 2 * (2 * 10 * 4 * 4)  # layers x (keys, values) x float32 [1, 2, 10, 4]
    cache = PrefixCache(max_bytes=2 * entry_bytes + 1, max_entries=3)
    for first in (100, 200, 300):
        cache.put([first, *range(9)], layers(10))
    assert len(cache) == 2 and cache.nbytes == 2 * entry_bytes and cache.stats["evictions"] == 1
    assert cache.take([100, 0, 1, 2]) == (0, None, None)  # least recently used went first
    assert cache.take([200, 0, 1, 2])[0] == 3  # now 200 was used last: 300 goes next
    cache.put([400, *range(9)], layers(10))
    assert cache.take([300, 0, 1, 2])[0] == 0 and cache.take([200, 0, 1, 2])[0] == 3
    cache.put(list(range(30)), layers(30))  # larger than the whole bound: not kept, nothing evicted
    assert len(cache) == 2 and cache.take(list(range(40)))[0] == 0

    cache = PrefixCache(max_bytes=2**30, max_entries=2)
    for first in (100, 200, 300):
        cache.put([first, *range(9)], layers(10))
    assert len(cache) == 2 and cache.stats["evictions"] == 1
    common, past, source = cache.take([300, 0, 1, 99, 5])
    assert common == 3 and past[0][0].shape == (1, 2, 3, 4)
    # A row that grew the entry whole replaces it; one that cut into it (a rollback) leaves it for LRU.
    cache.put([300, *range(12)], layers(13), grown_from=source)
    assert len(cache) == 2 and cache.nbytes == entry_bytes + entry_bytes * 13 // 10
    common, _, source = cache.take([300, 0, 1, 2, 3, 99])
    cache.put([300, 0, 1, 2, 3, 99], layers(6), grown_from=source)
    assert len(cache) == 2 and cache.take([300, *range(12), 7])[0] == 13
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


async def test_the_server_empties_the_prefix_cache_when_weights_change_and_after_a_rollout(make_server, tokenizer):
    server = make_server()
    await server.launch()
    prompt = _prompt(tokenizer, "hello")
    first = await server.generate(prompt, dict(GREEDY), request_id="t")
    assert len(server.prefix_cache) == 1
    await server.begin_weight_update()
    assert len(server.prefix_cache) == 0  # stale keys and values never meet the new weights
    await server.load_weights({"lm_head.weight": torch.zeros_like(server.model.lm_head.weight)})
    await server.finish_weight_update(1)
    second = await server.generate(prompt + first.token_ids, dict(GREEDY), request_id="t")
    assert set(second.token_ids) == {0}
    stats = await server.get_stats()
    assert stats["prefix_cache"]["hits"] == 0 and stats["prefix_cache"]["entries"] == 1
    await server.sleep()  # verl sleeps the replicas after every rollout
    assert len(server.prefix_cache) == 0

    assert make_server(prefix_cache=False).prefix_cache is None
    with pytest.raises(ValueError, match="unknown keys \\['prefix_cache_size'\\]"):
        make_server(prefix_cache_size=1)


async def test_weight_major_layers_are_a_server_option_that_is_on_by_default(make_server):
    default, off = make_server(), make_server(weight_major_matmul=False)
    await default.launch()
    await off.launch()
    assert "forward" in vars(default.model.lm_head) and "forward" not in vars(off.model.lm_head)


@pytest.mark.parametrize("flag", ["prefix_cache", "weight_major_matmul"])
def test_a_server_switch_that_is_not_true_or_false_is_refused(make_server, flag):
    with pytest.raises(ValueError, match=f"{flag} must be true or false, not 'no'"):
        make_server(**{flag: "no"})


# Continuous batching: requests join a batch that is decoding, and sample what they would sample alone.


def _decode_all(batch: DecodingBatch) -> dict:
    results = {}
    while batch:
        results.update(batch.step())
    return results


def test_a_request_joining_a_decoding_batch_samples_what_it_samples_alone(model, tokenizer):
    long = SamplingRequest(_prompt(tokenizer, "a long story " * 6), max_tokens=20, temperature=1.0, seed=11)
    short = SamplingRequest(_prompt(tokenizer, "hi"), max_tokens=4, temperature=0.8, seed=5)
    later = SamplingRequest(_prompt(tokenizer, "and a third one"), max_tokens=9, temperature=1.0, seed=2)
    batch = DecodingBatch(model, pad_id=0)
    batch.admit([("long", long)], torch.Generator())
    finished = {}
    for _ in range(6):
        finished.update(batch.step())
    assert not finished and len(batch) == 1
    batch.admit([("short", short), ("later", later)], torch.Generator())
    assert len(batch) == 3
    for _ in range(4):
        finished.update(batch.step())
    assert set(finished) == {"short"}  # done while the long row still decodes
    finished.update(_decode_all(batch))
    for name, request in [("long", long), ("short", short), ("later", later)]:
        _assert_as_alone(model, request, finished[name])


def test_a_joining_row_continues_its_cached_prefix_and_the_batch_narrows_when_long_rows_leave(model, tokenizer):
    cache = PrefixCache(2**26)
    first = _greedy(_prompt(tokenizer, "count to five"), max_tokens=6)
    turn = _run(model, [first], cache)[0]
    follow_up = _greedy(first.prompt_ids + turn.token_ids + tokenizer.encode(TOOL_RESPONSE), max_tokens=6)
    long = _greedy(_prompt(tokenizer, "a much longer prompt " * 10), max_tokens=3)
    batch = DecodingBatch(model, pad_id=0, prefix_cache=cache)
    batch.admit([("long", long)], torch.Generator())
    batch.step()
    reused_before = cache.stats["reused_tokens"]
    batch.admit([("follow_up", follow_up)], torch.Generator())
    assert cache.stats["reused_tokens"] - reused_before == len(first.prompt_ids) + len(turn.token_ids) - 1
    finished = batch.step()
    finished += batch.step()
    assert [name for name, _ in finished] == ["long"]
    # The long row's padding columns went with it: the batch is as wide as the follow-up's own tokens.
    assert batch.width == len(follow_up.prompt_ids) + 2
    finished += _decode_all(batch).items()
    finished = dict(finished)
    _assert_as_alone(model, long, finished["long"])
    _assert_as_alone(model, follow_up, finished["follow_up"])


async def test_a_call_arriving_mid_batch_joins_it_and_a_sync_waits_for_the_batch_to_drain(
    make_server, tokenizer, monkeypatch
):
    server = make_server(response_length=400, max_new_tokens=400)
    await server.launch()
    watch = BatchWatch(server, monkeypatch)
    prompt = _prompt(tokenizer, "hello")
    long = await _decoding_call(server, watch, prompt, max_tokens=300)
    short = asyncio.create_task(server.generate(prompt, {**SAMPLED, "max_tokens": 3}, request_id="short"))
    await bounded(short, "the short call")
    assert not long.done()  # the short call did not wait for the long one's batch to end
    assert server.stats["prefills"] == 2

    sync = asyncio.create_task(server.begin_weight_update())
    await bounded(watch.model_wanted.wait(), "the sync to wait for the decoding batch")
    after_sync = asyncio.create_task(server.generate(prompt, {**SAMPLED, "max_tokens": 3}, request_id="after"))
    await asyncio.sleep(0)  # the call queues itself
    await bounded(watch.steps_after(2), "two decoding steps after the new call was queued")
    # The sync waits for the long row, the new call for the sync: it was not let into the batch.
    assert not sync.done() and not after_sync.done() and watch.admitted_at_step == [None, None]
    assert len((await bounded(long, "the long call")).token_ids) == 300
    await bounded(sync, "the sync once the batch drained")
    await server.finish_weight_update(5)
    assert (await bounded(after_sync, "the call after the sync")).extra_fields["global_steps"] == 5
    assert watch.admitted_at_step == [None, None, 5]  # sampled from the synced weights only


async def test_a_request_that_fails_to_prefill_fails_alone_and_the_decoding_rows_finish(
    make_server, tokenizer, monkeypatch
):
    server = make_server(response_length=400, max_new_tokens=400)
    await server.launch()
    prompt = _prompt(tokenizer, "hello")
    decoding = await _decoding_call(server, BatchWatch(server, monkeypatch), prompt, max_tokens=100)
    out_of_vocabulary = [len(tokenizer) + 10**6]
    with pytest.raises(IndexError):
        await server.generate(prompt + out_of_vocabulary, dict(SAMPLED), request_id="bad")
    assert not decoding.done()
    assert len((await decoding).token_ids) == 100


async def test_a_failed_decoding_step_fails_every_row_of_the_batch_and_the_server_goes_on(
    make_server, tokenizer, monkeypatch
):
    server = make_server()
    await server.launch()
    prompt = _prompt(tokenizer, "hello")
    original_step = DecodingBatch.step

    def failing_step(self):
        monkeypatch.setattr(DecodingBatch, "step", original_step)  # only this one step fails
        raise RuntimeError("decoding failed")

    monkeypatch.setattr(DecodingBatch, "step", failing_step)
    calls = [server.generate(prompt, dict(SAMPLED), request_id=str(i)) for i in range(3)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert [str(outcome) for outcome in outcomes] == ["decoding failed"] * 3
    assert (await server.generate(prompt, dict(SAMPLED), request_id="next")).token_ids


async def test_a_bfloat16_rollout_holds_bf16_weights_synced_from_float32_masters(
    make_server, tiny_model_dir, tokenizer
):
    server = make_server(dtype="bfloat16")
    await server.launch()
    assert {parameter.dtype for parameter in server.model.parameters()} == {torch.bfloat16}
    adapter = CpuServerAdapter(RolloutConfig(dtype="bfloat16"), ModelConfig(tiny_model_dir, tokenizer), None, 0)
    adapter._server = _LocalHandle(server)
    master = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    head = master.lm_head.weight.detach() * 3  # a float32 update the server has not seen
    await adapter.update_weights(iter([("lm_head.weight", head)]), global_steps=1)
    assert torch.equal(server.model.lm_head.weight, head.to(torch.bfloat16))
    prompt = _prompt(tokenizer, "hello")
    out = await server.generate(prompt, dict(GREEDY), request_id="bf16")
    with torch.no_grad():
        logits = server.model(torch.tensor([prompt + out.token_ids])).logits[0].float()
    expected = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    rows = torch.arange(len(out.token_ids))
    # The log-probs of the bf16 model's own distribution (what verl's rollout-correction metrics compare).
    assert out.log_probs == pytest.approx(expected[rows, torch.tensor(out.token_ids)].tolist(), abs=2e-2)
