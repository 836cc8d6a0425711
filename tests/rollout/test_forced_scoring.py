"""`cleaner.rollout.forced_scoring`: llama.cpp scores a token as a forced one-token generation after its prefix."""

from __future__ import annotations

import pytest
from fake_inference_server import FakeInferenceServer

from cleaner.rollout.clients import InferenceServerError
from cleaner.rollout.forced_scoring import ForcedScorer


def forcing_server_answer(path, body):
    """llama.cpp's /completion honouring the logit bias: the forced token is generated, log-prob -len(prompt)/10."""
    [[token, bias]] = body["logit_bias"]
    assert bias >= 100 and body["n_predict"] == 1 and body["n_probs"] == 1
    logprob = -len(body["prompt"]) / 10
    return 200, {"tokens": [token], "completion_probabilities": [{"id": token, "logprob": logprob}]}


async def test_forced_scorer_scores_each_token_after_its_prefix():
    with FakeInferenceServer(forcing_server_answer) as server:
        values = await ForcedScorer(server.url)([5, 6, 7, 8, 9], [1, 3, 4])
    assert values == pytest.approx([-0.1, -0.3, -0.4])
    assert [(body["prompt"], body["logit_bias"]) for _, body in server.requests] == [
        ([5], [[6, 100.0]]),
        ([5, 6, 7], [[8, 100.0]]),
        ([5, 6, 7, 8], [[9, 100.0]]),
    ]
    assert {path for path, _ in server.requests} == {"/completion"}


async def test_forced_scorer_fails_when_the_server_ignores_the_bias():
    def unforced(path, body):
        return 200, {"tokens": [0], "completion_probabilities": [{"id": 0, "logprob": -1.0}]}

    with FakeInferenceServer(unforced) as server, pytest.raises(InferenceServerError, match="forced token 6"):
        await ForcedScorer(server.url)([5, 6], [1])
    with pytest.raises(ValueError, match="first token has no context"):
        await ForcedScorer("http://127.0.0.1:1")([5, 6], [0])
