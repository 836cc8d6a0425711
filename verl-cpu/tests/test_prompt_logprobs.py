"""Prompt log-probs of the `cpu` rollout: verl's `generate()` contract, checked against a plain full forward pass."""

from __future__ import annotations

import pytest
import torch
from server_fixtures import GREEDY, SAMPLED
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl_cpu.decoding import generate_batch
from verl_cpu.prompt_logprobs import score_prompt
from verl_cpu.sampling import SamplingRequest
from verl_cpu.server import sampling_request

pytestmark = pytest.mark.slow  # loads the tiny model


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompt(tiny_model_dir) -> list[int]:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "Sum the first ten primes, then explain each step. " * 4}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


def _full_forward_log_probs(model, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([tokens])).logits[0].float(), dim=-1)


@pytest.mark.parametrize("chunk_tokens", [7, 256])
def test_row_i_holds_the_log_prob_of_token_i_plus_1_and_the_last_row_is_a_dummy(model, prompt, chunk_tokens):
    _, last_logits, scored = score_prompt(model, prompt, 0, chunk_tokens=chunk_tokens)
    expected = _full_forward_log_probs(model, prompt)
    assert len(scored.logprobs) == len(scored.ids) == len(prompt)
    assert scored.ids[:-1] == [[token] for token in prompt[1:]]
    rows = torch.tensor(scored.logprobs[:-1]).squeeze(-1)
    torch.testing.assert_close(
        rows, expected[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])], atol=1e-4, rtol=0
    )
    assert scored.logprobs[-1] == [0.0] and scored.ids[-1] == [0]
    torch.testing.assert_close(torch.log_softmax(last_logits[0], -1), expected[-1], atol=1e-4, rtol=0)


def test_with_k_each_row_holds_the_top_k_tokens_of_its_position_best_first(model, prompt):
    _, _, scored = score_prompt(model, prompt, 3, chunk_tokens=10)
    top = torch.topk(_full_forward_log_probs(model, prompt)[:-1], 3, dim=-1)
    assert scored.ids[:-1] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor(scored.logprobs[:-1]), top.values, atol=1e-4, rtol=0)
    assert scored.ids[-1] == [0, 0, 0] and scored.logprobs[-1] == [0.0, 0.0, 0.0]


def test_a_scored_request_samples_what_it_samples_without_scoring_and_leaves_its_batch_mates_alone(model, prompt):
    plain = [
        SamplingRequest(prompt, max_tokens=6, temperature=1.0, seed=11),
        SamplingRequest(prompt[:30], max_tokens=9, temperature=0.8, seed=5),
    ]
    scored = SamplingRequest(prompt, max_tokens=6, temperature=1.0, seed=11, prompt_logprobs=0)
    alone = generate_batch(model, plain, pad_id=0, rng=torch.Generator())
    mixed = generate_batch(model, [scored, plain[1]], pad_id=0, rng=torch.Generator())
    assert mixed[0].token_ids == alone[0].token_ids and mixed[1].token_ids == alone[1].token_ids
    assert mixed[0].log_probs == pytest.approx(alone[0].log_probs, abs=1e-4)
    assert alone[0].prompt_logprobs is None and len(mixed[0].prompt_logprobs) == len(prompt)


async def test_the_server_returns_verls_extra_fields_only_when_asked(make_server, prompt):
    server = make_server()
    await server.launch()
    scored = await server.generate(prompt, {**GREEDY, "max_tokens": 1, "prompt_logprobs": 0}, request_id="score")
    expected = _full_forward_log_probs(server.model, prompt)
    assert len(scored.token_ids) == 1 and scored.token_ids[0] == int(expected[-1].argmax())
    rows = scored.extra_fields["prompt_logprobs"]
    assert len(rows) == len(scored.extra_fields["prompt_ids"]) == len(prompt)
    assert rows[5][0] == pytest.approx(float(expected[5, prompt[6]]), abs=1e-4)
    plain = await server.generate(prompt, dict(SAMPLED), request_id="plain")
    assert "prompt_logprobs" not in plain.extra_fields and "prompt_ids" not in plain.extra_fields


def test_prompt_logprobs_and_detokenize_are_mapped_and_a_negative_count_refused():
    # What verl's distillation teacher sends (teacher_manager._get_teacher_sampling_params).
    teacher = {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0, "detokenize": False}
    assert sampling_request([1, 2], teacher, 8, 16, {9}).prompt_logprobs == 0
    assert sampling_request([1, 2], {}, 8, 16, {9}).prompt_logprobs is None
    with pytest.raises(ValueError, match="prompt_logprobs must be None or >= 0"):
        sampling_request([1, 2], {"prompt_logprobs": -1}, 8, 16, {9})


def _sampled(model, prompt, **sampling) -> tuple[list[int], list[float]]:
    request = SamplingRequest(prompt, max_tokens=6, seed=3, **sampling)
    [result] = generate_batch(model, [request], pad_id=0, rng=torch.Generator())
    return result.token_ids, result.log_probs


def _scored(model, prompt, continuation) -> list[float]:
    whole = prompt + continuation
    _, _, scored = score_prompt(model, whole, 0)
    return [row[0] for row in scored.logprobs[len(prompt) - 1 : len(whole) - 1]]


def test_prompt_log_probs_are_raw_and_equal_sampled_ones_only_at_t1_without_truncation(model, prompt):
    """As on verl's vLLM and SGLang servers: prompt log-probs are the raw temperature-1 distribution; a continuation
    sampled at T = 1 without top-k/top-p, scored as a prompt, gets back the log-probs it was sampled with."""
    tokens, sampled = _sampled(model, prompt, temperature=1.0)
    assert _scored(model, prompt, tokens) == pytest.approx(sampled, abs=1e-4)
    for sampling in ({"temperature": 0.7}, {"temperature": 1.0, "top_k": 3}, {"temperature": 1.0, "top_p": 0.5}):
        tokens, sampled = _sampled(model, prompt, **sampling)
        expected = _full_forward_log_probs(model, prompt + tokens)
        raw = [float(expected[len(prompt) - 1 + i, token]) for i, token in enumerate(tokens)]
        assert _scored(model, prompt, tokens) == pytest.approx(raw, abs=1e-4), sampling
        assert sampled != pytest.approx(raw, abs=1e-4), sampling


def _processed(logits: torch.Tensor, token: int, temperature: float, top_k: int, top_p: float) -> float:
    """vLLM's processed log-prob, written out: scale, keep the top k, keep the nucleus, renormalise."""
    probs = torch.softmax(logits / temperature, dim=-1)
    order = torch.argsort(probs, descending=True)
    kept = order[:top_k] if top_k > 0 else order
    mass = torch.cumsum(probs[kept], dim=0)
    kept = kept[: int((mass - probs[kept] < top_p).sum())]
    assert token in kept.tolist()
    return float(torch.log(probs[token] / probs[kept].sum()))


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.7, -1, 1.0), (1.0, 5, 1.0), (0.8, -1, 0.6), (1.3, 8, 0.9)]
)
def test_sampled_log_probs_are_processed_like_vllms(model, prompt, temperature, top_k, top_p):
    tokens, sampled = _sampled(model, prompt, temperature=temperature, top_k=top_k, top_p=top_p)
    logits = _full_forward_log_probs(model, prompt + tokens)  # log-softmax: the same distribution as the logits
    expected = [
        _processed(logits[len(prompt) - 1 + i], token, temperature, top_k, top_p) for i, token in enumerate(tokens)
    ]
    assert sampled == pytest.approx(expected, abs=1e-4)
