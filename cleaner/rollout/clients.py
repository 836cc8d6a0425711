"""Token-in/token-out clients for running inference servers, shaped like verl's `server_manager.generate`.

verl's agent loops call `await server_manager.generate(request_id, *, prompt_ids, sampling_params, ...)`
and expect a `TokenOutput` (sampled ids + their log-probs). These clients give the same call over HTTP for
three servers, answering a verl-free `ServerOutput` with the same fields; `cleaner.verl.standalone`
turns it into verl's `TokenOutput`, so the training agent loop runs unchanged against any of them:

- SGLang's native `/generate` (`input_ids`),
- vLLM's OpenAI `/v1/completions` with a token-id prompt,
- llama.cpp's native `/completion` (prompt as an id list, `n_probs`, `return_tokens`).

verl's scoring contract (what SAAR's `rollback_is_measure` / `rollback_is_threshold` send): sampling param
`prompt_logprobs=0` with `max_tokens=1` asks for the log-prob of every prompt token; the answer's
`extra_fields["prompt_logprobs"]` has one row per prompt token, row i holding `[log-prob of token i + 1]`
and the last row a dummy `[0.0]` (`extra_fields["prompt_ids"]` the matching ids), as verl 0.9.1's vLLM and
SGLang servers return it. SGLang (`logprob_start_len=0`, `meta_info.input_token_logprobs`) and vLLM
(`prompt_logprobs` in `/v1/completions`, `choices[0].prompt_logprobs`) honour it; llama.cpp's server returns
log-probs of generated tokens only, so that client refuses the request, naming the option. As from verl's
servers, an aborted answer carries no prompt log-probs (SAAR sends the request again), and so does a completed
answer from a server that ignored the request (SAAR then refuses the setting, naming its key); prompt log-probs
that are there but do not fit the prompt are an error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx

from .client_config import ServerClientConfig


@dataclass(frozen=True)
class ServerOutput:
    """One generation: the fields of verl's `TokenOutput` that the HTTP servers fill."""

    token_ids: list[int]
    log_probs: list[float] | None
    stop_reason: str  # "completed" or "aborted", as verl names them
    extra_fields: dict[str, Any] = field(default_factory=dict)


class InferenceServerError(RuntimeError):
    """The server refused the request, failed, or answered something that is not a generation."""


class InferenceServerTimeout(InferenceServerError):
    """No answer within `request_timeout_s`."""


# The settings that make SAAR score splices through `prompt_logprobs`, for error messages.
SCORING_OPTIONS = "SAAR's rollback_is_measure / rollback_is_threshold (`cleaner rollout --score-rollbacks`)"


def requested_prompt_logprobs(sampling_params: dict[str, Any]) -> bool:
    """Whether the call asks for prompt log-probs (verl's `prompt_logprobs`); only 0 (the actual tokens) is served."""
    value = sampling_params.get("prompt_logprobs")
    if value is None:
        return False
    if isinstance(value, bool) or value != 0:
        raise InferenceServerError(
            f"prompt_logprobs={value!r}: the rollout clients return the log-prob of each prompt token only "
            "(prompt_logprobs=0), not top-k alternatives"
        )
    return True


def prompt_logprob_rows(prompt_ids: list[int], logprobs: list[float]) -> dict[str, list[list[float]] | list[list[int]]]:
    """verl's `extra_fields` for `prompt_logprobs=0`: `logprobs[i]` is the log-prob of prompt token i + 1."""
    if len(logprobs) != len(prompt_ids) - 1:
        raise InferenceServerError(f"{len(logprobs)} prompt log-probs for a prompt of {len(prompt_ids)} tokens")
    return {
        "prompt_logprobs": [[float(x)] for x in logprobs] + [[0.0]],
        "prompt_ids": [[int(t)] for t in prompt_ids[1:]] + [[0]],
    }


def call_seed(base_seed: int, call_index: int) -> int:
    """Seed of the `call_index`-th generate of one trajectory.

    Every call gets its own seed: a resample after a failed tool call sees the same prompt as the failed
    turn, and must not replay it token for token. Two runs with the same base seed (SAAR on and off) still
    sample identical turns up to the first place they diverge.
    """
    return (base_seed * 1_000_003 + call_index) % (2**31 - 1)


class TokenServerClient(ABC):
    """verl `generate()` over HTTP. One instance serves many concurrent trajectories."""

    def __init__(self, config: ServerClientConfig):
        self.config = config
        self._http: httpx.AsyncClient | None = None
        self._calls_per_request: dict[str, int] = defaultdict(int)

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(max_connections=self.config.max_connections)
            self._http = httpx.AsyncClient(
                base_url=self.config.url, timeout=self.config.request_timeout_s, limits=limits
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        **_unused: Any,
    ) -> ServerOutput:
        if image_data or video_data or audio_data:
            raise InferenceServerError("multi-modal inputs are not supported by the HTTP rollout clients")
        if not prompt_ids:
            raise InferenceServerError("empty prompt_ids")
        with_prompt_logprobs = requested_prompt_logprobs(sampling_params)
        if with_prompt_logprobs and not self.returns_prompt_logprobs:
            raise InferenceServerError(
                f"{self.config.backend}'s server returns no prompt-token log-probs, so it cannot answer "
                f"prompt_logprobs, which {SCORING_OPTIONS} need: serve the model with vLLM or SGLang, or turn "
                "the option off"
            )
        max_new_tokens = self._max_new_tokens(len(prompt_ids), sampling_params)
        seed = self._seed(request_id, sampling_params)
        path, body = self.request(prompt_ids, sampling_params, max_new_tokens, seed)
        if with_prompt_logprobs:
            body.update(self.prompt_logprobs_fields())
        try:
            response = await self.http.post(path, json=body)
        except httpx.TimeoutException as exc:
            raise InferenceServerTimeout(
                f"{self.config.backend} server at {self.config.url}{path} gave no answer within "
                f"{self.config.request_timeout_s} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise InferenceServerError(f"{self.config.backend} server at {self.config.url}{path}: {exc!r}") from exc
        if response.status_code != 200:
            raise InferenceServerError(
                f"{self.config.backend} server at {self.config.url}{path} answered HTTP {response.status_code}: "
                f"{response.text[:500]}"
            )
        try:
            payload = response.json()
        except ValueError as exc:
            raise InferenceServerError(
                f"{self.config.backend} server answered non-JSON: {response.text[:200]}"
            ) from exc
        output = self.parse(payload)
        if output.log_probs is not None and len(output.log_probs) != len(output.token_ids):
            raise InferenceServerError(
                f"{self.config.backend} server returned {len(output.token_ids)} tokens but {len(output.log_probs)} log-probs"
            )
        scored = with_prompt_logprobs and output.stop_reason != "aborted"
        values = self.parse_prompt_logprobs(payload, prompt_ids) if scored else None
        if values is not None:
            rows = prompt_logprob_rows(prompt_ids, values)
            output = ServerOutput(
                output.token_ids, output.log_probs, output.stop_reason, {**output.extra_fields, **rows}
            )
        return output

    def _max_new_tokens(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        requested = sampling_params.get("max_new_tokens", sampling_params.get("max_tokens", self.config.max_new_tokens))
        budget = self.config.max_model_len - prompt_len
        if budget <= 0:
            raise InferenceServerError(
                f"prompt of {prompt_len} tokens leaves no room to generate within max_model_len={self.config.max_model_len}"
            )
        return min(int(requested), budget)

    def _seed(self, request_id: str, sampling_params: dict[str, Any]) -> int | None:
        base = sampling_params.get("seed", self.config.seed)
        call_index = self._calls_per_request[request_id]
        self._calls_per_request[request_id] += 1
        return None if base is None else call_seed(int(base), call_index)

    # Whether the server can return the log-probs of prompt tokens (verl's `prompt_logprobs`).
    returns_prompt_logprobs = False

    def prompt_logprobs_fields(self) -> dict[str, Any]:
        """Request fields that ask the server for prompt-token log-probs."""
        raise NotImplementedError

    def parse_prompt_logprobs(self, payload: dict[str, Any], prompt_ids: list[int]) -> list[float] | None:
        """Log-probs of prompt tokens 1 .. n-1 (the first token has no context); None when the answer has none."""
        raise NotImplementedError

    @abstractmethod
    def request(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], max_new_tokens: int, seed: int | None
    ) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of one generation request."""

    @abstractmethod
    def parse(self, payload: dict[str, Any]) -> ServerOutput:
        """The server's JSON answer as a ServerOutput (raise InferenceServerError if it is not one)."""


def _sampling_fields(sampling_params: dict[str, Any]) -> dict[str, Any]:
    return {
        key: sampling_params[key]
        for key in ("temperature", "top_p", "top_k", "repetition_penalty")
        if sampling_params.get(key) is not None
    }


def _require(payload: Any, key: str, backend: str) -> Any:
    if not isinstance(payload, dict) or key not in payload:
        raise InferenceServerError(f"{backend} answer has no {key!r}: {str(payload)[:300]}")
    return payload[key]


def _logprob(value: Any, backend: str, index: int) -> float:
    if value is None:
        raise InferenceServerError(f"{backend} returned no log-prob for prompt token {index}")
    return float(value)


def _stop_fields(sampling_params: dict[str, Any]) -> dict[str, Any]:
    """Stop strings and stop token ids (SGLang and vLLM name them alike), only those the caller set."""
    fields: dict[str, Any] = {}
    if sampling_params.get("stop"):
        fields["stop"] = sampling_params["stop"]
    if sampling_params.get("stop_token_ids"):
        fields["stop_token_ids"] = list(sampling_params["stop_token_ids"])
    return fields


class SGLangClient(TokenServerClient):
    returns_prompt_logprobs = True

    def prompt_logprobs_fields(self):
        return {"logprob_start_len": 0}

    def parse_prompt_logprobs(self, payload, prompt_ids):
        entries = (payload.get("meta_info") or {}).get("input_token_logprobs")
        if entries is None:
            return None
        if len(entries) != len(prompt_ids) or [int(e[1]) for e in entries] != list(prompt_ids):
            raise InferenceServerError("sglang input_token_logprobs do not match the prompt's token ids")
        return [_logprob(e[0], "sglang", i) for i, e in enumerate(entries) if i > 0]

    def request(self, prompt_ids, sampling_params, max_new_tokens, seed):
        params = {
            **_sampling_fields(sampling_params),
            **_stop_fields(sampling_params),
            "max_new_tokens": max_new_tokens,
        }
        if seed is not None:
            params["sampling_seed"] = seed
        body = {"input_ids": list(prompt_ids), "sampling_params": params, "return_logprob": True}
        return "/generate", body

    def parse(self, payload):
        meta = _require(payload, "meta_info", "sglang")
        pairs = _require(meta, "output_token_logprobs", "sglang")
        token_ids = [int(item[1]) for item in pairs]
        log_probs = [float(item[0]) for item in pairs]
        output_ids = payload.get("output_ids")
        if output_ids is not None and list(output_ids) != token_ids:
            raise InferenceServerError("sglang output_ids disagree with output_token_logprobs")
        finish = (meta.get("finish_reason") or {}).get("type")
        return ServerOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason="aborted" if finish == "abort" else "completed",
            extra_fields={"finish_reason": finish},
        )


class VLLMClient(TokenServerClient):
    returns_prompt_logprobs = True

    def prompt_logprobs_fields(self):
        return {"prompt_logprobs": 0}

    def parse_prompt_logprobs(self, payload, prompt_ids):
        rows = payload["choices"][0].get("prompt_logprobs")
        if rows is None:
            return None
        if len(rows) != len(prompt_ids):
            raise InferenceServerError(
                f"vllm returned {len(rows)} prompt log-prob rows for {len(prompt_ids)} prompt tokens"
            )
        result = []
        for index in range(1, len(prompt_ids)):
            entry = (rows[index] or {}).get(str(prompt_ids[index]))
            if entry is None:
                raise InferenceServerError(f"vllm prompt_logprobs row {index} lacks prompt token {prompt_ids[index]}")
            result.append(_logprob(entry["logprob"], "vllm", index))
        return result

    def request(self, prompt_ids, sampling_params, max_new_tokens, seed):
        body = {
            "model": self.config.model,
            "prompt": list(prompt_ids),
            "max_tokens": max_new_tokens,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            **_sampling_fields(sampling_params),
            **_stop_fields(sampling_params),
        }
        if seed is not None:
            body["seed"] = seed
        return "/v1/completions", body

    def parse(self, payload):
        choices = _require(payload, "choices", "vllm")
        if not choices:
            raise InferenceServerError("vllm answer has no choices")
        choice = choices[0]
        logprobs = _require(choice, "logprobs", "vllm")
        log_probs = [float(x) for x in _require(logprobs, "token_logprobs", "vllm")]
        token_ids = choice.get("token_ids")
        if token_ids is None:
            # Older servers: ids only as "token_id:N" strings (return_tokens_as_token_ids).
            token_ids = [_vllm_token_id(tok) for tok in _require(logprobs, "tokens", "vllm")]
        finish = choice.get("finish_reason")
        return ServerOutput(
            token_ids=[int(t) for t in token_ids],
            log_probs=log_probs,
            stop_reason="aborted" if finish == "abort" else "completed",
            extra_fields={"finish_reason": finish},
        )


def _vllm_token_id(token: str) -> int:
    prefix = "token_id:"
    if not token.startswith(prefix):
        raise InferenceServerError(
            f"vllm returned token {token!r} without its id; upgrade vLLM (needs return_token_ids)"
        )
    return int(token[len(prefix) :])


LLAMACPP_FIELD_NAMES = {"repetition_penalty": "repeat_penalty"}  # the rest keep verl's names


class LlamaCppClient(TokenServerClient):
    def request(self, prompt_ids, sampling_params, max_new_tokens, seed):
        body = {
            "prompt": list(prompt_ids),
            "n_predict": max_new_tokens,
            "n_probs": 1,
            "return_tokens": True,
            "cache_prompt": True,
            # Plain temperature / top-p / top-k sampling, as verl's servers do (llama.cpp defaults add min-p).
            "min_p": 0.0,
        }
        for key, value in _sampling_fields(sampling_params).items():
            body[LLAMACPP_FIELD_NAMES.get(key, key)] = value
        if sampling_params.get("stop"):
            body["stop"] = sampling_params["stop"]
        if sampling_params.get("stop_token_ids"):
            raise InferenceServerError(
                "llama.cpp's /completion cannot stop on token ids; use a tool parser without stop_token_ids "
                "(end-of-turn is already the model's EOS)"
            )
        if seed is not None:
            body["seed"] = seed
        return "/completion", body

    def parse(self, payload):
        token_ids = [int(t) for t in _require(payload, "tokens", "llamacpp")]
        probs = _require(payload, "completion_probabilities", "llamacpp")
        if [int(p["id"]) for p in probs] != token_ids:
            raise InferenceServerError("llama.cpp completion_probabilities ids disagree with tokens")
        stop_type = payload.get("stop_type")
        return ServerOutput(
            token_ids=token_ids,
            log_probs=[float(p["logprob"]) for p in probs],
            stop_reason="completed",
            extra_fields={"finish_reason": "length" if stop_type == "limit" else "stop"},
        )


_CLIENTS: dict[str, type[TokenServerClient]] = {"sglang": SGLangClient, "vllm": VLLMClient, "llamacpp": LlamaCppClient}


def make_client(config: ServerClientConfig) -> TokenServerClient:
    return _CLIENTS[config.backend](config)
