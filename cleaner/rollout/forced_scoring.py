"""Log-probs of given tokens in a given context from a llama.cpp server, by forcing one token per request.

llama.cpp's server returns log-probs only for the tokens it generates (no prompt log-probs), so each token is
scored as a one-token generation: prompt = the sequence before it, `n_predict: 1`, and a logit bias that makes
the token the one sampled. The `logprob` llama.cpp reports is computed from the model's raw logits, before
the bias and temperature (the sampling chain works on a copy), so it is log π(token | prefix) at temperature 1:
the same quantity as `response_logprobs` (`n_probs: 1`). With `cache_prompt` each request after the first
prefills only the tokens since the previous one, so scoring k tokens costs about k decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .clients import InferenceServerError

# Large enough that the forced token is always sampled; the reported log-prob ignores it.
FORCE_BIAS = 100.0


@dataclass(frozen=True)
class ForcedScorer:
    """`await scorer(sequence, indices)`: log π(sequence[i] | sequence[:i]) for each index, in order."""

    url: str
    timeout_s: float = 120.0

    async def __call__(self, sequence: list[int], indices: list[int]) -> list[float]:
        if any(i < 1 or i >= len(sequence) for i in indices):
            raise ValueError(f"token indices must lie in [1, {len(sequence)}): the first token has no context")
        result = []
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s) as http:
            for index in indices:
                result.append(await self._one(http, sequence[:index], sequence[index]))
        return result

    async def _one(self, http: httpx.AsyncClient, prefix: list[int], token: int) -> float:
        body = {
            "prompt": prefix,
            "n_predict": 1,
            "n_probs": 1,
            "return_tokens": True,
            "cache_prompt": True,
            "temperature": 1.0,
            "min_p": 0.0,
            "seed": 0,
            "logit_bias": [[token, FORCE_BIAS]],
        }
        try:
            response = await http.post("/completion", json=body)
        except httpx.TimeoutException as exc:
            raise InferenceServerError(f"llama.cpp at {self.url} gave no answer within {self.timeout_s} s") from exc
        except httpx.HTTPError as exc:
            raise InferenceServerError(f"llama.cpp at {self.url}: {exc!r}") from exc
        if response.status_code != 200:
            raise InferenceServerError(
                f"llama.cpp at {self.url} answered HTTP {response.status_code}: {response.text[:300]}"
            )
        payload = response.json()
        probs = payload.get("completion_probabilities") or []
        if payload.get("tokens") != [token] or len(probs) != 1 or int(probs[0]["id"]) != token:
            raise InferenceServerError(
                f"llama.cpp did not generate the forced token {token} (got {payload.get('tokens')}): "
                "is the logit bias ignored?"
            )
        return float(probs[0]["logprob"])
