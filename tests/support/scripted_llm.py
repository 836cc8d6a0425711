"""Test support: a scripted stand-in for verl's LLM server client: replays chosen token ids and log-probs.

It implements the one method verl's agent loops call, `generate(request_id, *, prompt_ids,
sampling_params, **kw) -> TokenOutput`, so the real `ToolAgentLoop` machinery (and `AgentLoopWorker`)
runs on CPU without a model. Each trajectory follows its own script: a script is bound to a request
the first time that request id is seen, by a marker string found in the decoded prompt (so n samples
of one prompt each replay the script from the start). Every request is recorded so tests can check
exactly what the model saw and which tokens it sampled.

Log-probs behave like verl's vLLM or SGLang server (`imitates`). Each sampled token has a raw (temperature 1)
log-prob, unique per (turn, position) so tests can trace tokens back; the server reports it as the engine's sampler
does: "vllm" (`processed_logprobs`) after temperature and top-k/top-p (divided by the temperature and shrunk by a
truncation, whose renormalised distribution gives its tokens higher log-probs); "sglang" after temperature only
(its sampler takes the log-probs before top-k/top-p). Both report the raw log-prob at T = 1 without truncation and
when greedy (T = 0). A turn's `log_prob` replaces every reported log-prob of that turn (e.g. NaN, a float16
overflow).

A request whose sampling parameters ask for `prompt_logprobs` (verl's scoring contract: one row per prompt
token, row i the log-prob of token i+1, the last row a dummy) is a scoring prefill: it consumes no script turn,
is recorded in `score_requests`, and is answered, by default (`prompt_logprob=ENGINE`), with raw log-probs that
depend on the context, as the engines compute them: a token in the exact context it was sampled in gets its raw
sampled log-prob, any other prompt token a value derived from its preceding tokens. A float or a function of the
prompt ids gives every token that value instead (a backend whose prompt log-probs ignore the context); None
answers like a backend without the feature (one token, no prompt log-probs). `scoring_aborts` makes the next
scoring requests fail as they do on verl's servers: "vllm" answers no tokens with stop_reason "aborted", "abort"
the same with SGLang's spelling, "sglang" raises the AssertionError of verl's `_extract_prompt_logprobs_sglang` on
an aborted request, "refuse" raises the ValueError verl's adapters raise for a prompt over the context length, and
"nan" answers with NaN prompt log-probs.
"""

from __future__ import annotations

import asyncio
import json
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.workers.rollout.replica import TokenOutput

from cleaner.saar.outcome import INFRA_ERROR_CATEGORIES, TOOL_OUTCOME_KEY, ErrorCategory, OutcomeKind, ToolOutcome

# The loop and its config are the package's (the overhead benchmark builds the same), re-exported for the tests.
from cleaner.verl.hand_built_loop import agent_loop_config as agent_loop_config
from cleaner.verl.hand_built_loop import build_agent_loop as build_agent_loop


@dataclass(frozen=True)
class ScriptedTurn:
    """One generation: either `text` (tokenized once) or explicit `token_ids`."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    append_eos: bool = True  # a real chat model ends its turn with the EOS token (`<|im_end|>` for Qwen)
    stop_reason: str = "completed"
    log_prob: float | None = None  # reported for every token of the turn instead of the engine's (e.g. NaN)

    def __post_init__(self) -> None:
        if (self.text is None) == (self.token_ids is None):
            raise ValueError("ScriptedTurn needs exactly one of `text` or `token_ids`")


@dataclass(frozen=True)
class RecordedRequest:
    request_id: str
    marker: str
    turn_index: int  # index into the script
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    token_ids: list[int]
    log_probs: list[float]  # as reported: processed by the sampling parameters
    raw_log_probs: list[float]  # the temperature-1, untruncated log-probs of the same tokens


@dataclass(frozen=True)
class RecordedScore:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    prompt_logprobs: list[list[float]] | None  # what the server answered (None: it returned none)


@dataclass
class _Cursor:
    marker: str
    next_turn: int = 0


def scripted_log_prob(turn_index: int, position: int) -> float:
    """A deterministic, distinct, negative raw log-prob per (turn, position), so tests can trace tokens back."""
    return -(1 + turn_index * 10007 + position) / 1_000_003


def processed_log_prob(raw: float, sampling_params: dict[str, Any], imitates: str = "vllm") -> float:
    """What the engine reports for a sampled token of raw log-prob `raw` (see the module docstring)."""
    temperature = sampling_params.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    if temperature == 0:
        return raw
    factor = 1.0 / temperature
    if imitates == "sglang":  # log softmax(logits / T), taken before top-k/top-p
        return raw * factor
    top_p, top_k = sampling_params.get("top_p"), sampling_params.get("top_k")
    if top_p is not None and top_p < 1.0:
        factor *= top_p
    if top_k is not None and top_k > 0:
        factor *= 0.5
    return raw * factor


def context_log_prob(context: Sequence[int], token: int) -> float:
    """A raw log-prob in [-3, -0.001] for `token` after `context` that changes with the last 32 context tokens."""
    key = ",".join(map(str, [*context[-32:], token])).encode()
    return -(1 + zlib.crc32(key) % 3000) / 1000


ENGINE = "engine"  # prompt_logprob: context-dependent raw log-probs, as vLLM and SGLang compute them


@dataclass
class ScriptedLLMServer:
    tokenizer: Any
    scripts: dict[str, list[ScriptedTurn | str]] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    # Simulated server latency, to exercise concurrency in tests and benchmarks.
    delay_s: float = 0.0
    # False: answer like a server run with `calculate_log_probs=False` (no log-probs at all).
    with_log_probs: bool = True
    # Scoring prefills (`prompt_logprobs`): ENGINE (context-dependent raw log-probs), the log-prob of every prompt
    # token, or a function of the prompt ids giving it; None answers like a backend without prompt log-probs.
    prompt_logprob: float | Callable[[list[int]], float] | str | None = ENGINE
    score_requests: list[RecordedScore] = field(default_factory=list)
    # The next scoring requests fail: "vllm", "abort", "sglang", "refuse" or "nan" (see the module docstring).
    scoring_aborts: list[str] = field(default_factory=list)
    # Whose sampled log-probs to report: "vllm" (processed_logprobs) or "sglang".
    imitates: str = "vllm"

    def __post_init__(self) -> None:
        if self.imitates not in ("vllm", "sglang"):
            raise ValueError(f"imitates must be 'vllm' or 'sglang', got {self.imitates!r}")
        self._compiled: dict[str, list[list[int]]] = {}
        self._stop_reasons: dict[str, list[str]] = {}
        self._log_probs: dict[str, list[float | None]] = {}
        self._scoring_in_flight = 0
        self.max_scoring_in_flight = 0  # the most scoring requests the server held at once (with `delay_s`)
        self._cursors: dict[str, _Cursor] = {}
        for marker, turns in list(self.scripts.items()):
            self.add_script(marker, turns)

    def add_script(self, marker: str, turns: Sequence[ScriptedTurn | str]) -> None:
        """Register the generations for every trajectory whose prompt contains `marker`."""
        if not marker:
            raise ValueError("a script marker must be a non-empty string")
        compiled, stop_reasons, log_probs = [], [], []
        for turn in turns:
            if isinstance(turn, str):
                turn = ScriptedTurn(text=turn)
            compiled.append(self._token_ids(turn))
            stop_reasons.append(turn.stop_reason)
            log_probs.append(turn.log_prob)
        self.scripts[marker] = list(turns)
        self._compiled[marker] = compiled
        self._stop_reasons[marker] = stop_reasons
        self._log_probs[marker] = log_probs

    def _token_ids(self, turn: ScriptedTurn) -> list[int]:
        if turn.token_ids is not None:
            ids = list(turn.token_ids)
        else:
            ids = self.tokenizer.encode(turn.text, add_special_tokens=False)
        if turn.append_eos:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    def _bind(self, request_id: str, prompt_ids: list[int]) -> _Cursor:
        cursor = self._cursors.get(request_id)
        if cursor is not None:
            return cursor
        prompt_text = self.tokenizer.decode(prompt_ids)
        found = [marker for marker in self._compiled if marker in prompt_text]
        if len(found) != 1:
            raise LookupError(
                f"request {request_id}: expected exactly one script marker in the prompt, found {found} "
                f"(registered: {sorted(self._compiled)})"
            )
        cursor = _Cursor(marker=found[0])
        self._cursors[request_id] = cursor
        return cursor

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        scoring = sampling_params.get("prompt_logprobs") is not None
        self._scoring_in_flight += scoring
        self.max_scoring_in_flight = max(self.max_scoring_in_flight, self._scoring_in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self._scoring_in_flight -= scoring
        if scoring:
            return self._score(request_id, list(prompt_ids), dict(sampling_params))
        cursor = self._bind(request_id, prompt_ids)
        turns = self._compiled[cursor.marker]
        if cursor.next_turn >= len(turns):
            raise IndexError(
                f"script {cursor.marker!r} has {len(turns)} turns; request {request_id} asked for turn {cursor.next_turn + 1}"
            )
        turn_index = cursor.next_turn
        cursor.next_turn += 1
        token_ids = list(turns[turn_index])
        raw_log_probs = [scripted_log_prob(turn_index, position) for position in range(len(token_ids))]
        log_probs = [processed_log_prob(raw, sampling_params, self.imitates) for raw in raw_log_probs]
        override = self._log_probs[cursor.marker][turn_index]
        if override is not None:
            log_probs = [override] * len(token_ids)
        self.requests.append(
            RecordedRequest(
                request_id=request_id,
                marker=cursor.marker,
                turn_index=turn_index,
                prompt_ids=list(prompt_ids),
                sampling_params=dict(sampling_params),
                token_ids=token_ids,
                log_probs=log_probs,
                raw_log_probs=raw_log_probs,
            )
        )
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if self.with_log_probs else None,
            stop_reason=self._stop_reasons[cursor.marker][turn_index],
            num_preempted=0,
        )

    def _score(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        style = self.scoring_aborts.pop(0) if self.scoring_aborts else None
        if style not in (None, "nan"):
            self.score_requests.append(RecordedScore(request_id, prompt_ids, sampling_params, None))
            if style == "sglang":  # verl's _extract_prompt_logprobs_sglang on an aborted request's empty logprobs
                raise AssertionError(
                    f"SGLang prompt_logprobs length (1) does not match sequence length ({len(prompt_ids)}); "
                    "check logprob_start_len=0 invariant."
                )
            if style == "refuse":  # verl's adapters, before the engine sees the request
                raise ValueError(
                    f"Prompt length ({len(prompt_ids)}) exceeds the model's maximum context length "
                    f"({len(prompt_ids) - 1})."
                )
            reason = {"vllm": "aborted", "abort": "abort"}[style]
            return TokenOutput(token_ids=[], log_probs=None, stop_reason=reason, extra_fields={"global_steps": 0})
        extra_fields: dict[str, Any] = {}
        rows = None
        if self.prompt_logprob is not None:
            values = self._prompt_values(request_id, prompt_ids)
            if style == "nan":
                values = [math.nan] * len(values)
            rows = [[value] for value in values] + [[0.0]]
            extra_fields = {"prompt_logprobs": rows, "prompt_ids": [[token] for token in prompt_ids[1:]] + [[0]]}
        self.score_requests.append(RecordedScore(request_id, prompt_ids, sampling_params, rows))
        return TokenOutput(
            token_ids=[self.tokenizer.eos_token_id],
            log_probs=[0.0] if self.with_log_probs else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields=extra_fields,
        )

    def _prompt_values(self, request_id: str, prompt_ids: list[int]) -> list[float]:
        """Log-probs of prompt tokens 1..n-1 (the first has none)."""
        if self.prompt_logprob != ENGINE:
            value = self.prompt_logprob(prompt_ids) if callable(self.prompt_logprob) else self.prompt_logprob
            return [float(value)] * (len(prompt_ids) - 1)
        values = [context_log_prob(prompt_ids[:index], prompt_ids[index]) for index in range(1, len(prompt_ids))]
        # A token in the very context it was sampled in: its raw sampled log-prob.
        for request in self.requests:
            start = len(request.prompt_ids)
            if request.request_id != request_id or prompt_ids[:start] != request.prompt_ids:
                continue
            for offset, (token, raw) in enumerate(zip(request.token_ids, request.raw_log_probs)):
                if start + offset >= len(prompt_ids) or prompt_ids[start + offset] != token:
                    break
                values[start + offset - 1] = raw
        return values

    def requests_for(self, marker: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.marker == marker]


# ---- a scripted Python tool and a ready-made loop, for tests and benchmarks ------------------------

# A scripted call's code declares what the tool reports, on a line of its own:
#   "# outcome: ok" (the default), "# outcome: exception NameError", "# outcome: syntax_error",
#   "# outcome: timeout", "# outcome: bad_call", "# outcome: infra judge_unreachable", ...
OUTCOME_DIRECTIVE = "# outcome:"
INFRA_TEXT = "Error: the execution service is unavailable."


def scripted_outcome(code: str):
    """The `ToolOutcome` a scripted call's code asks for (see OUTCOME_DIRECTIVE)."""
    for line in code.splitlines():
        line = line.strip()
        if not line.startswith(OUTCOME_DIRECTIVE):
            continue
        words = line[len(OUTCOME_DIRECTIVE) :].split()
        if not words:
            raise ValueError(f"empty outcome directive in {code!r}")
        if words[0] == "ok":
            return ToolOutcome.ok()
        if words[0] == "infra":
            category = ErrorCategory(words[1])
            if category not in INFRA_ERROR_CATEGORIES:
                raise ValueError(f"{category.value} is not an infrastructure error")
            return ToolOutcome.infra_error(category, detail="scripted")
        return ToolOutcome.model_error(ErrorCategory(words[0]), exception_type=words[1] if len(words) > 1 else None)
    return ToolOutcome.ok()


def scripted_tool_text(code: str, outcome) -> str:
    """What the scripted tool prints: distinct per code, so tests can find it in a trajectory."""
    tag = f"{zlib.crc32(code.encode()):08x}"
    if outcome.kind is OutcomeKind.OK:
        return f"stdout: result-{tag}"
    if outcome.kind is OutcomeKind.INFRA_ERROR:
        return INFRA_TEXT
    name = outcome.exception_type or outcome.category.value
    return f"Traceback (most recent call last):\n{name}: scripted failure err-{tag}"


def scripted_tool_schema(name: str = "code_interpreter") -> OpenAIFunctionToolSchema:
    return OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": name,
                "description": "Run Python code.",
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": "Python code"}},
                    "required": ["code"],
                },
            },
        }
    )


class ScriptedPythonTool(BaseTool):
    """A verl `BaseTool` that runs nothing: each call reports the outcome its code declares.

    Loadable from a verl tool yaml (`class_name: support.scripted_llm.ScriptedPythonTool`). Its `calls` list
    records every executed code, in order.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema or scripted_tool_schema())
        self.calls: list[str] = []

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        code = parameters.get("code")
        if not isinstance(code, str):
            outcome = ToolOutcome.model_error(ErrorCategory.BAD_CALL, detail="missing code")
            return ToolResponse(text="Error: missing `code`."), 0.0, {TOOL_OUTCOME_KEY: outcome.to_dict()}
        self.calls.append(code)
        outcome = scripted_outcome(code)
        return ToolResponse(text=scripted_tool_text(code, outcome)), 0.0, {TOOL_OUTCOME_KEY: outcome.to_dict()}


def scripted_python_tool(name: str = "code_interpreter") -> ScriptedPythonTool:
    return ScriptedPythonTool({"type": "native"}, scripted_tool_schema(name))


def tool_call_text(code: str, name: str = "code_interpreter") -> str:
    """A hermes `<tool_call>` block, as a Qwen model writes it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"code": code}}) + "\n</tool_call>"


def training_sampling_params(config) -> dict[str, Any]:
    rollout = config.actor_rollout_ref.rollout
    return {
        "temperature": rollout.temperature,
        "top_p": rollout.top_p,
        "top_k": rollout.top_k,
        "repetition_penalty": 1.0,
        "logprobs": True,
    }


def validation_sampling_params(config) -> dict[str, Any]:
    val = config.actor_rollout_ref.rollout.val_kwargs
    return {
        "temperature": val.temperature,
        "top_p": val.top_p,
        "top_k": val.top_k,
        "repetition_penalty": 1.0,
        "logprobs": True,
    }


# ---- checks on a finished trajectory --------------------------------------------------------------


def unsampled_positions(
    server: ScriptedLLMServer,
    marker: str,
    response_ids: list[int],
    response_mask: list[int],
    response_logprobs: list[float],
) -> list[int]:
    """Response positions with mask 1 whose (token, log-prob) the server never emitted for this script.

    Scripted log-probs are unique per (turn, position), so each one names the exact token it belongs to.
    """
    emitted = {}
    for request in server.requests_for(marker):
        emitted.update(zip(request.log_probs, request.token_ids))
    return [
        index
        for index, (token, mask, logprob) in enumerate(zip(response_ids, response_mask, response_logprobs))
        if mask == 1 and emitted.get(logprob) != token
    ]


def off_context_positions(server: ScriptedLLMServer, marker: str, output: Any) -> list[int]:
    """Response positions with mask 1 whose token is trained after a context other than the one it was sampled in
    (the prompt and every token before it, as the server saw them when it sampled the token)."""
    emitted = {}
    for request in server.requests_for(marker):
        for offset, logprob in enumerate(request.log_probs):
            emitted[logprob] = (request, offset)
    sequence = list(output.prompt_ids) + list(output.response_ids)
    start = len(output.prompt_ids)
    positions = []
    for index, (mask, logprob) in enumerate(zip(output.response_mask, output.response_logprobs)):
        if mask != 1:
            continue
        request, offset = emitted[logprob]
        if sequence[: start + index] != request.prompt_ids + request.token_ids[:offset]:
            positions.append(index)
    return positions


def render_conversation(tokenizer, tool_schemas: list[dict], messages: list[dict[str, str]]) -> str:
    """The chat template's text for a conversation whose assistant contents are the raw generated texts.

    This is what `decode(prompt_ids + response_ids)` must equal: when the conversation ends on a tool
    message the stream carries the next generation prompt; after a final assistant turn verl's stream
    stops at `<|im_end|>` (the template's trailing newline is not part of it).
    """
    ends_on_tool = messages[-1]["role"] == "tool"
    text = tokenizer.apply_chat_template(
        messages, tools=tool_schemas, tokenize=False, add_generation_prompt=ends_on_tool
    )
    return text if ends_on_tool else text.removesuffix("\n")
