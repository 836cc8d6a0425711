"""Record each kept assistant turn of a `cleaner_tool_agent` trajectory for the purification modes and the audit.

The loop reports two things as it runs: every generation's token count, and every call's `ToolOutcome` together
with the assistant message whose call it was (the last one in `messages` while the call runs). SAAR cuts and
splices turns, but it keeps message objects, so at the end the kept assistant messages (those after the last
user message) name the failed turns; they pair in order with the runs of mask-1 tokens of the final response,
which give each turn's token range. A turn that ended the trajectory by a limit has no message and no call that
ran; its text still tells whether it holds a complete code block, which is all SimpleTIR's void rule reads
(`cleaner.purify.turns.is_void_text`, on every turn's text). rStar2-Agent's RoC counts come from the whole
response decoded with its special tokens, as rStar decodes it (`cleaner.purify.roc.roc_counts`). The result goes
into `extra_fields` (`cleaner.purify.turns.EXTRA_FIELD_KEYS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cleaner.purify.roc import roc_counts
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY, Turn, is_void_text, mask_runs
from cleaner.rewards.final_answer import final_turn, last_boxed
from cleaner.saar.outcome import ErrorCategory, OutcomeKind, ToolOutcome


def has_final_answer(text: str) -> bool:
    """A `\\boxed{}` in the turn's visible text (outside its reasoning and its `<tool_call>` spans)."""
    return last_boxed(final_turn(text)) is not None


class TurnRecorder:
    def __init__(self) -> None:
        self.generated_tokens = 0
        # id(assistant message) -> (the message, kept so its id stays unique; outcomes of its calls)
        self._outcomes: dict[int, tuple[dict, list[ToolOutcome]]] = {}

    def on_generation(self, tokens: int) -> None:
        self.generated_tokens += tokens

    def on_call(self, messages: Sequence[dict], outcomes: Sequence[ToolOutcome]) -> None:
        """Outcomes of calls of the turn whose assistant message is the last one in `messages`."""
        message = next((item for item in reversed(messages) if item.get("role") == "assistant"), None)
        if message is None:
            return
        self._outcomes.setdefault(id(message), (message, []))[1].extend(outcomes)

    def turns(
        self,
        messages: Sequence[dict],
        response_ids: Sequence[int],
        response_mask: Sequence[int],
        decode: Callable[[Sequence[int]], str],
        find_call_start: Callable[[Sequence[int]], int | None] | None,
    ) -> list[Turn]:
        """The kept turns; `decode` gives a token run's text without special tokens."""
        last_user = max((i for i, item in enumerate(messages) if item.get("role") == "user"), default=-1)
        assistant = [item for item in messages[last_user + 1 :] if item.get("role") == "assistant"]
        turns = []
        for index, (start, end) in enumerate(mask_runs(response_mask)):
            message = assistant[index] if index < len(assistant) else None
            outcomes = self._outcomes.get(id(message), (None, []))[1] if message is not None else []
            well_formed = [item for item in outcomes if item.category is not ErrorCategory.BAD_CALL]
            ids = list(response_ids[start:end])
            text = decode(ids)
            call = bool(message and message.get("tool_calls")) and (bool(well_formed) or not outcomes)
            code_start = code_end = None
            if call or outcomes:
                offset = find_call_start(ids) if find_call_start is not None else None
                code_start, code_end = start + (offset or 0), end
            turns.append(
                Turn(
                    start=start,
                    end=end,
                    code_start=code_start,
                    code_end=code_end,
                    call=call,
                    answer=has_final_answer(text),
                    failed=any(item.kind is OutcomeKind.MODEL_ERROR for item in outcomes),
                    void=is_void_text(text),
                )
            )
        return turns

    def extra_fields(self, turns: list[Turn], response_text: str) -> dict[str, Any]:
        """The record; `response_text` is the whole response decoded with its special tokens."""
        return {
            TURNS_KEY: [turn.to_dict() for turn in turns],
            GENERATED_TOKENS_KEY: self.generated_tokens,
            ROC_COUNTS_KEY: roc_counts(response_text).to_dict(),
        }
