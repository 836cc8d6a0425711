"""The CPU rollout's sampler and server with the real tiny Qwen2 model: what verl's agent loops rely on."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cleaner.verl.cpu.generation import FINISH_LENGTH, FINISH_STOP, SamplingRequest, generate_batch
from cleaner.verl.cpu.rollout import CpuServerAdapter
from cleaner.verl.cpu.server import CpuGenerationServer, rollout_dtype, sampling_request

pytestmark = pytest.mark.slow  # loads a model and runs torch generation: seconds per test


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


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


class _Config:
    dtype = "float32"
    prompt_length = 64
    response_length = 8
    seed = 0
    engine_kwargs = {"cleaner_cpu": {"max_new_tokens": 6}}


class _ModelConfig:
    def __init__(self, path, tokenizer):
        self.local_path = str(path)
        self.tokenizer = tokenizer


async def test_server_batches_concurrent_requests_and_serves_synced_weights(tiny_model_dir, tokenizer, monkeypatch):
    server = CpuGenerationServer(_Config(), _ModelConfig(tiny_model_dir, tokenizer), replica_rank=0, max_batch_size=8)
    # The server converts verl's model DictConfig; this test hands it the dataclass-like object directly.
    monkeypatch.setattr("verl.utils.config.omega_conf_to_dataclass", lambda config, dataclass_type=None: config)
    await server.launch()
    prompt = _prompt(tokenizer, "hello")
    params = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
    outputs = await asyncio.gather(*[server.generate(prompt, dict(params), request_id=str(i)) for i in range(5)])
    stats = await server.get_stats()
    assert stats["requests"] == 5 and stats["batches"] == 1  # one forward pass per step for all five
    assert all(len(out.token_ids) == len(out.log_probs) <= 6 for out in outputs)
    assert len({tuple(out.token_ids) for out in outputs}) == 1

    # A weight sync through the trainer-side adapter, in buckets: an all-zero lm_head makes every token equally
    # likely, so greedy decoding then takes token 0 at once.
    adapter = CpuServerAdapter(_Config(), _ModelConfig(tiny_model_dir, tokenizer), None, replica_rank=0)
    adapter._server = _LocalHandle(server)
    monkeypatch.setattr("cleaner.verl.cpu.rollout.WEIGHT_BUCKET_BYTES", 1)  # one bucket per tensor
    zeros = torch.zeros_like(server.model.lm_head.weight)
    embed = server.model.model.embed_tokens.weight.detach().clone()
    await adapter.update_weights(
        iter([("model.embed_tokens.weight", embed), ("lm_head.weight", zeros)]), global_steps=3
    )
    assert adapter._server.calls == ["begin_weight_update", "load_weights", "load_weights", "finish_weight_update"]
    after = await server.generate(prompt, dict(params), request_id="after")
    assert set(after.token_ids) == {0} and after.extra_fields["global_steps"] == 3
    assert after.log_probs[0] == pytest.approx(-math.log(zeros.shape[0]), abs=1e-4)


async def test_generation_waits_for_a_weight_sync_and_a_failed_sync_stops_the_server(
    tiny_model_dir, tokenizer, monkeypatch
):
    server = CpuGenerationServer(_Config(), _ModelConfig(tiny_model_dir, tokenizer), replica_rank=0, max_batch_size=8)
    monkeypatch.setattr("verl.utils.config.omega_conf_to_dataclass", lambda config, dataclass_type=None: config)
    await server.launch()
    prompt = _prompt(tokenizer, "hello")
    params = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
    await server.begin_weight_update()
    waiting = asyncio.create_task(server.generate(prompt, dict(params), request_id="during-sync"))
    await server.load_weights({"lm_head.weight": torch.zeros_like(server.model.lm_head.weight)})
    await asyncio.sleep(0.1)
    assert not waiting.done()  # nothing samples from a half-synced model
    await server.finish_weight_update(7)
    assert (await waiting).extra_fields["global_steps"] == 7

    adapter = CpuServerAdapter(_Config(), _ModelConfig(tiny_model_dir, tokenizer), None, replica_rank=0)
    adapter._server = _LocalHandle(server)
    with pytest.raises(KeyError, match="does not have"):
        await adapter.update_weights(iter([("not.a.weight", torch.zeros(1))]), global_steps=8)
    with pytest.raises(RuntimeError, match="weight sync failed halfway"):
        await server.generate(prompt, dict(params), request_id="after-failed-sync")


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
