"""A scripted stand-in for verl's LLM server client: replays chosen token ids and log-probs.

It implements the one method verl's agent loops call, `generate(request_id, *, prompt_ids,
sampling_params, **kw) -> TokenOutput`, so the real `ToolAgentLoop` machinery (and `AgentLoopWorker`)
runs on CPU without a model. Each trajectory follows its own script: a script is bound to a request
the first time that request id is seen, by a marker string found in the decoded prompt (so n samples
of one prompt each replay the script from the start). Every request is recorded so tests can check
exactly what the model saw and which tokens it sampled.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass(frozen=True)
class ScriptedTurn:
    """One generation: either `text` (tokenized once) or explicit `token_ids`."""

    text: str | None = None
    token_ids: tuple[int, ...] | None = None
    append_eos: bool = True  # a real chat model ends its turn with the EOS token (`<|im_end|>` for Qwen)
    stop_reason: str = "completed"

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
    log_probs: list[float]


@dataclass
class _Cursor:
    marker: str
    next_turn: int = 0


def scripted_log_prob(turn_index: int, position: int) -> float:
    """A deterministic, distinct, negative log-prob per (turn, position), so tests can trace tokens back."""
    return -(1 + turn_index * 10007 + position) / 1_000_003


@dataclass
class ScriptedLLMServer:
    tokenizer: Any
    scripts: dict[str, list[ScriptedTurn | str]] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    # Simulated server latency, to exercise concurrency in tests and benchmarks.
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        self._compiled: dict[str, list[list[int]]] = {}
        self._stop_reasons: dict[str, list[str]] = {}
        self._cursors: dict[str, _Cursor] = {}
        for marker, turns in list(self.scripts.items()):
            self.add_script(marker, turns)

    def add_script(self, marker: str, turns: Sequence[ScriptedTurn | str]) -> None:
        """Register the generations for every trajectory whose prompt contains `marker`."""
        if not marker:
            raise ValueError("a script marker must be a non-empty string")
        compiled, stop_reasons = [], []
        for turn in turns:
            if isinstance(turn, str):
                turn = ScriptedTurn(text=turn)
            compiled.append(self._token_ids(turn))
            stop_reasons.append(turn.stop_reason)
        self.scripts[marker] = list(turns)
        self._compiled[marker] = compiled
        self._stop_reasons[marker] = stop_reasons

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
        from verl.workers.rollout.replica import TokenOutput

        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        cursor = self._bind(request_id, prompt_ids)
        turns = self._compiled[cursor.marker]
        if cursor.next_turn >= len(turns):
            raise IndexError(
                f"script {cursor.marker!r} has {len(turns)} turns; request {request_id} asked for turn {cursor.next_turn + 1}"
            )
        turn_index = cursor.next_turn
        cursor.next_turn += 1
        token_ids = list(turns[turn_index])
        log_probs = [scripted_log_prob(turn_index, position) for position in range(len(token_ids))]
        self.requests.append(
            RecordedRequest(
                request_id=request_id,
                marker=cursor.marker,
                turn_index=turn_index,
                prompt_ids=list(prompt_ids),
                sampling_params=dict(sampling_params),
                token_ids=token_ids,
                log_probs=log_probs,
            )
        )
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason=self._stop_reasons[cursor.marker][turn_index],
            num_preempted=0,
        )

    def requests_for(self, marker: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.marker == marker]
