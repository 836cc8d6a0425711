"""Each inference client against a local fake of its server's HTTP API."""

from __future__ import annotations

import pytest
from fake_inference_server import FakeInferenceServer

from cleaner.rollout.client_config import ServerClientConfig
from cleaner.rollout.clients import InferenceServerError, InferenceServerTimeout, call_seed, make_client

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
REPLY_IDS = [9707, 0, 151645]
REPLY_LOGPROBS = [-0.5, -1.25, -0.01]
SAMPLING = {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def sglang_answer(path, body):
    return 200, {
        "text": "Hello!",
        "output_ids": REPLY_IDS,
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": 151645},
            "output_token_logprobs": [[lp, tid, None] for lp, tid in zip(REPLY_LOGPROBS, REPLY_IDS)],
        },
    }


def vllm_answer(path, body):
    return 200, {
        "choices": [
            {
                "text": "Hello!",
                "token_ids": REPLY_IDS,
                "finish_reason": "stop",
                "logprobs": {"tokens": [f"token_id:{t}" for t in REPLY_IDS], "token_logprobs": REPLY_LOGPROBS},
            }
        ]
    }


def vllm_answer_without_token_ids(path, body):
    status, answer = vllm_answer(path, body)
    del answer["choices"][0]["token_ids"]
    return status, answer


def llamacpp_answer(path, body):
    return 200, {
        "content": "Hello!<|im_end|>",
        "tokens": REPLY_IDS,
        "stop_type": "eos",
        "completion_probabilities": [
            {"id": t, "logprob": lp, "top_logprobs": [{"id": t, "logprob": lp}]}
            for t, lp in zip(REPLY_IDS, REPLY_LOGPROBS)
        ],
    }


ANSWERS = {"sglang": sglang_answer, "vllm": vllm_answer, "llamacpp": llamacpp_answer}
PATHS = {"sglang": "/generate", "vllm": "/v1/completions", "llamacpp": "/completion"}


def client_for(backend, url, **overrides):
    return make_client(
        ServerClientConfig(backend=backend, url=url, **{"max_model_len": 64, "max_new_tokens": 32, **overrides})
    )


@pytest.mark.parametrize("backend", ["sglang", "vllm", "llamacpp"])
async def test_generate_returns_ids_and_logprobs(backend):
    with FakeInferenceServer(ANSWERS[backend]) as server:
        client = client_for(backend, server.url, seed=7)
        try:
            out = await client.generate("req-1", prompt_ids=PROMPT, sampling_params=SAMPLING)
        finally:
            await client.aclose()
    assert out.token_ids == REPLY_IDS
    assert out.log_probs == pytest.approx(REPLY_LOGPROBS)
    assert out.stop_reason == "completed"
    path, body = server.requests[0]
    assert path == PATHS[backend]
    sent_prompt = {"sglang": "input_ids", "vllm": "prompt", "llamacpp": "prompt"}[backend]
    assert body[sent_prompt] == PROMPT


async def test_sglang_request_shape():
    with FakeInferenceServer(sglang_answer) as server:
        client = client_for("sglang", server.url, seed=3)
        await client.generate("r", prompt_ids=PROMPT, sampling_params={**SAMPLING, "stop_token_ids": [151658]})
        await client.aclose()
    body = server.requests[0][1]
    assert body["return_logprob"] is True
    params = body["sampling_params"]
    assert params["max_new_tokens"] == 32
    assert params["temperature"] == 0.7 and params["top_p"] == 0.9 and params["top_k"] == -1
    assert params["stop_token_ids"] == [151658]
    assert params["sampling_seed"] == call_seed(3, 0)


async def test_vllm_request_shape_and_old_server_ids():
    with FakeInferenceServer(vllm_answer_without_token_ids) as server:
        client = client_for("vllm", server.url, model="qwen")
        out = await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        await client.aclose()
    assert out.token_ids == REPLY_IDS
    body = server.requests[0][1]
    assert body["model"] == "qwen" and body["max_tokens"] == 32 and body["logprobs"] == 0
    assert body["return_token_ids"] is True and body["return_tokens_as_token_ids"] is True
    assert "seed" not in body


async def test_llamacpp_request_shape():
    with FakeInferenceServer(llamacpp_answer) as server:
        client = client_for("llamacpp", server.url, seed=11)
        await client.generate("r", prompt_ids=PROMPT, sampling_params={**SAMPLING, "repetition_penalty": 1.1})
        await client.aclose()
    body = server.requests[0][1]
    assert body["n_predict"] == 32 and body["n_probs"] == 1
    assert body["return_tokens"] is True and body["cache_prompt"] is True
    assert body["repeat_penalty"] == 1.1 and body["min_p"] == 0.0
    assert body["seed"] == call_seed(11, 0)


async def test_each_call_of_a_trajectory_gets_its_own_reproducible_seed():
    with FakeInferenceServer(llamacpp_answer) as server:
        client = client_for("llamacpp", server.url)
        params = {**SAMPLING, "seed": 5}
        for request_id in ("a", "a", "b"):
            await client.generate(request_id, prompt_ids=PROMPT, sampling_params=params)
        await client.aclose()
    seeds = [body["seed"] for _, body in server.requests]
    assert seeds[0] != seeds[1], "a resample must not replay the failed turn's seed"
    assert seeds[2] == seeds[0], "the same base seed must give the same first turn in another trajectory"


async def test_generation_budget_is_capped_by_the_context():
    with FakeInferenceServer(llamacpp_answer) as server:
        client = client_for("llamacpp", server.url, max_model_len=len(PROMPT) + 5)
        await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        with pytest.raises(InferenceServerError, match="no room to generate"):
            await client.generate("r", prompt_ids=PROMPT + [1] * 5, sampling_params=SAMPLING)
        await client.aclose()
    assert server.requests[0][1]["n_predict"] == 5


@pytest.mark.parametrize("backend", ["sglang", "vllm", "llamacpp"])
async def test_http_error_names_the_status_and_body(backend):
    with FakeInferenceServer(lambda p, b: (500, {"error": "out of KV cache"})) as server:
        client = client_for(backend, server.url)
        with pytest.raises(InferenceServerError, match="HTTP 500.*out of KV cache"):
            await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        await client.aclose()


@pytest.mark.parametrize("backend", ["sglang", "vllm", "llamacpp"])
async def test_malformed_answer_is_an_error(backend):
    with FakeInferenceServer(lambda p, b: (200, {"unexpected": True})) as server:
        client = client_for(backend, server.url)
        with pytest.raises(InferenceServerError, match="has no"):
            await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        await client.aclose()


async def test_mismatched_logprobs_are_an_error():
    def answer(path, body):
        status, payload = llamacpp_answer(path, body)
        payload["completion_probabilities"][0]["id"] = 42
        return status, payload

    with FakeInferenceServer(answer) as server:
        client = client_for("llamacpp", server.url)
        with pytest.raises(InferenceServerError, match="disagree"):
            await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        await client.aclose()


async def test_timeout_raises_a_timeout_error():
    with FakeInferenceServer(llamacpp_answer, hold_answers=True) as server:
        client = client_for("llamacpp", server.url, request_timeout_s=0.2)
        with pytest.raises(InferenceServerTimeout, match="no answer within 0.2 s"):
            await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        await client.aclose()


async def test_unreachable_server_is_an_error():
    client = client_for("sglang", "http://127.0.0.1:9")
    with pytest.raises(InferenceServerError, match="sglang server"):
        await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
    await client.aclose()


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="unknown inference backend 'tgi'"):
        ServerClientConfig(backend="tgi", url="http://x")


# verl's scoring contract: prompt_logprobs=0 and max_tokens=1; row i of the answer is the log-prob of token i + 1.
SCORING = {**SAMPLING, "prompt_logprobs": 0, "max_tokens": 1}
PROMPT_LOGPROBS = [-(i + 1) / 10 for i in range(1, len(PROMPT))]  # of PROMPT[1:]


def sglang_scoring_answer(path, body):
    status, answer = sglang_answer(path, body)
    if body.get("logprob_start_len") == 0:
        # SGLang: one entry per input token, the first without a log-prob.
        answer["meta_info"]["input_token_logprobs"] = [[None, PROMPT[0], None]] + [
            [lp, tid, None] for lp, tid in zip(PROMPT_LOGPROBS, PROMPT[1:])
        ]
    return status, answer


def vllm_scoring_answer(path, body):
    status, answer = vllm_answer(path, body)
    if body.get("prompt_logprobs") == 0:
        # vLLM: one entry per prompt token (None first), each {token id: Logprob} holding the prompt token.
        answer["choices"][0]["prompt_logprobs"] = [None] + [
            {str(tid): {"logprob": lp, "rank": 2, "decoded_token": "x"}} for lp, tid in zip(PROMPT_LOGPROBS, PROMPT[1:])
        ]
    return status, answer


@pytest.mark.parametrize(("backend", "answer"), [("sglang", sglang_scoring_answer), ("vllm", vllm_scoring_answer)])
async def test_prompt_logprobs_come_back_in_verls_layout(backend, answer):
    with FakeInferenceServer(answer) as server:
        client = client_for(backend, server.url)
        try:
            out = await client.generate("r", prompt_ids=PROMPT, sampling_params=SCORING)
            plain = await client.generate("r", prompt_ids=PROMPT, sampling_params=SAMPLING)
        finally:
            await client.aclose()
    rows = out.extra_fields["prompt_logprobs"]
    assert len(rows) == len(PROMPT) and rows[-1] == [0.0]
    assert [row[0] for row in rows[:-1]] == pytest.approx(PROMPT_LOGPROBS)
    assert out.extra_fields["prompt_ids"] == [[t] for t in PROMPT[1:]] + [[0]]
    scoring_body, plain_body = server.requests[0][1], server.requests[1][1]
    if backend == "sglang":
        assert scoring_body["logprob_start_len"] == 0 and scoring_body["sampling_params"]["max_new_tokens"] == 1
        assert "logprob_start_len" not in plain_body
    else:
        assert scoring_body["prompt_logprobs"] == 0 and scoring_body["max_tokens"] == 1
        assert "prompt_logprobs" not in plain_body
    assert "prompt_logprobs" not in plain.extra_fields


async def test_llamacpp_refuses_prompt_logprobs_naming_the_option():
    with FakeInferenceServer(llamacpp_answer) as server:
        client = client_for("llamacpp", server.url)
        with pytest.raises(
            InferenceServerError, match=r"no prompt-token log-probs.*rollback_is_measure.*--score-rollbacks"
        ):
            await client.generate("r", prompt_ids=PROMPT, sampling_params=SCORING)
        await client.aclose()
    assert server.requests == []


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
async def test_a_completed_answer_without_prompt_logprobs_comes_back_without_them(backend):
    """As from verl's servers: the agent loop, not the client, decides that such a server cannot serve SAAR's
    scoring (a config error naming the key)."""
    with FakeInferenceServer(ANSWERS[backend]) as server:
        client = client_for(backend, server.url)
        try:
            out = await client.generate("r", prompt_ids=PROMPT, sampling_params=SCORING)
        finally:
            await client.aclose()
    assert out.stop_reason == "completed" and "prompt_logprobs" not in out.extra_fields


def aborted(answer):
    def respond(path, body):
        status, payload = answer(path, body)
        if "meta_info" in payload:
            payload["meta_info"]["finish_reason"] = {"type": "abort"}
            payload["meta_info"]["input_token_logprobs"] = []  # an abort cuts the prompt log-probs short
        else:
            payload["choices"][0]["finish_reason"] = "abort"
            payload["choices"][0]["prompt_logprobs"] = None
        return status, payload

    return respond


@pytest.mark.parametrize(("backend", "answer"), [("sglang", sglang_scoring_answer), ("vllm", vllm_scoring_answer)])
async def test_an_aborted_scoring_answer_comes_back_aborted_without_prompt_logprobs(backend, answer):
    with FakeInferenceServer(aborted(answer)) as server:
        client = client_for(backend, server.url)
        try:
            out = await client.generate("r", prompt_ids=PROMPT, sampling_params=SCORING)
        finally:
            await client.aclose()
    assert out.stop_reason == "aborted" and "prompt_logprobs" not in out.extra_fields


async def test_vllm_prompt_logprobs_of_other_tokens_are_an_error():
    def answer(path, body):
        status, payload = vllm_scoring_answer(path, body)
        payload["choices"][0]["prompt_logprobs"][3] = {"7": {"logprob": -0.1, "rank": 1}}
        return status, payload

    with FakeInferenceServer(answer) as server:
        client = client_for("vllm", server.url)
        with pytest.raises(InferenceServerError, match=f"row 3 lacks prompt token {PROMPT[3]}"):
            await client.generate("r", prompt_ids=PROMPT, sampling_params=SCORING)
        await client.aclose()


async def test_top_k_prompt_logprobs_are_refused():
    client = client_for("vllm", "http://127.0.0.1:9")
    with pytest.raises(InferenceServerError, match="prompt_logprobs=5"):
        await client.generate("r", prompt_ids=PROMPT, sampling_params={**SCORING, "prompt_logprobs": 5})
    await client.aclose()
