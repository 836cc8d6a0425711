"""Record every failed tool call a `cleaner_tool_agent` trajectory generated, including the attempts SAAR rolls back.

The loop reports each call's `ToolOutcome` with the tokens of the turn that made it (the last assistant message in
`messages` while the call runs is that turn's), and each position SAAR purifies (its first failed attempt's message,
with the negative-sample collector if negatives are on). SAAR removes the messages of the turns it cuts and keeps
the others' message objects, so at the end a recorded turn whose message is among the kept assistant messages is in
the final response, paired with the per-turn record (`cleaner.verl.turn_recorder`) in the same order; one whose
message is gone was rolled back. The result goes into `extra_fields` (`cleaner.purify.failed_calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cleaner.purify.failed_calls import FAILED_CALLS_KEY, FailedCall, Fate
from cleaner.purify.turns import Turn
from cleaner.saar.negatives import NegativeCollector
from cleaner.saar.outcome import OutcomeKind, ToolOutcome


@dataclass
class _Attempt:
    message: dict  # held so its id stays unique while the trajectory runs
    ids: list[int]
    attempt: int
    categories: list[str] = field(default_factory=list)
    negative_candidate: bool = False
    pair_id: str | None = None  # the negative sample offered from it, if the collector kept one


def kept_assistant_messages(messages: Sequence[dict]) -> list[dict]:
    """The assistant messages of the trajectory's response (after the last user message), in order."""
    last_user = max((i for i, item in enumerate(messages) if item.get("role") == "user"), default=-1)
    return [item for item in messages[last_user + 1 :] if item.get("role") == "assistant"]


class FailedCallRecorder:
    def __init__(self) -> None:
        self._attempts: dict[int, _Attempt] = {}  # id(assistant message) -> the failed turn, in generation order

    def on_call(
        self, messages: Sequence[dict], turn_ids: Sequence[int], outcomes: Sequence[ToolOutcome], attempt: int = 0
    ) -> None:
        """Outcomes of calls of the turn `turn_ids`, whose assistant message is the last one in `messages`."""
        failed = [outcome.category.value for outcome in outcomes if outcome.kind is OutcomeKind.MODEL_ERROR]
        message = next((item for item in reversed(messages) if item.get("role") == "assistant"), None)
        if not failed or message is None or not turn_ids:
            return
        entry = self._attempts.get(id(message))
        if entry is None:
            entry = self._attempts[id(message)] = _Attempt(message, list(turn_ids), attempt)
        entry.categories.extend(failed)

    def on_purified(self, failed_message: dict, negatives: NegativeCollector | None) -> None:
        """SAAR spliced a retry over the failed first attempt whose message is `failed_message`; with negatives on,
        the collector was just offered that attempt (its newest pair, if it kept it)."""
        entry = self._attempts.get(id(failed_message))
        if entry is None:
            return
        entry.negative_candidate = True
        claimed = {item.pair_id for item in self._attempts.values()}
        if negatives is not None and negatives.pairs and negatives.pairs[-1].pair_id not in claimed:
            entry.pair_id = negatives.pairs[-1].pair_id

    def failed_calls(
        self,
        messages: Sequence[dict],
        turns: Sequence[Turn],
        find_call_start: Callable[[Sequence[int]], int | None] | None,
        negative_ids: set[str],
    ) -> list[FailedCall]:
        """Every recorded failed turn with its fate; `turns` is the per-turn record of the final response and
        `negative_ids` the pair ids of the negative samples this trajectory keeps."""
        kept = {id(message): index for index, message in enumerate(kept_assistant_messages(messages))}
        present = {id(message) for message in messages}
        records = []
        for key, entry in self._attempts.items():
            index = kept.get(key)
            turn = turns[index] if index is not None and index < len(turns) else None
            fate: Fate = "kept" if turn is not None else "lost" if key in present else "rolled_back"
            offset = find_call_start(entry.ids) if find_call_start is not None else None
            if offset is None or not 0 <= offset < len(entry.ids):
                offset = 0  # no boundary: the whole turn is the call, as for a negative sample
            candidate = entry.negative_candidate and fate == "rolled_back"
            records.append(
                FailedCall(
                    attempt=entry.attempt,
                    categories=tuple(entry.categories),
                    turn_tokens=len(entry.ids),
                    call_tokens=len(entry.ids) - offset,
                    fate=fate,
                    start=turn.start if turn is not None else None,
                    end=turn.end if turn is not None else None,
                    code_start=turn.code_start if turn is not None else None,
                    code_end=turn.code_end if turn is not None else None,
                    negative_candidate=candidate,
                    negative=candidate and entry.pair_id is not None and entry.pair_id in negative_ids,
                )
            )
        return records

    def extra_fields(self, records: Sequence[FailedCall]) -> dict[str, Any]:
        return {FAILED_CALLS_KEY: [record.to_dict() for record in records]}
