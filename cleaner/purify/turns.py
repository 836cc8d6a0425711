"""The per-turn record of a trajectory: one entry per assistant turn kept in the final response.

The agent loop writes it into `extra_fields` (`purify_turns`, with `purify_generated_tokens` and RoC's text
counts `purify_roc_counts`) and `cleaner rollout` into each trajectory record, so the masks, RoC's penalties and
the audit are computed from the same facts in the trainer and over recorded trajectories.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TURNS_KEY = "purify_turns"
# Every token the server generated for the trajectory: kept turns, plus first attempts and resamples SAAR cut.
GENERATED_TOKENS_KEY = "purify_generated_tokens"
ROC_COUNTS_KEY = "purify_roc_counts"  # cleaner.purify.roc.RocCounts of the final response
EXTRA_FIELD_KEYS = (TURNS_KEY, GENERATED_TOKENS_KEY, ROC_COUNTS_KEY)

# SimpleTIR's code block (recipe/simpletir/agent_utils.py, execute_predictions), and its stand-in in the hermes
# template the recipes use: a closed `<tool_call>` pair (the code travels inside the call's JSON).
CODE_BLOCK = re.compile(r"```(?:py|python)?\n(.*?)\n```", re.DOTALL)
TOOL_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)
ANSWER_MARK = "\\boxed{"


def is_void_text(text: str) -> bool:
    """SimpleTIR's void turn, on a turn's generated text: neither a complete code block nor `\\boxed{`.

    A turn cut inside its block (per-turn or total length) has no closing fence or tag and is void; a complete
    block is not, whether or not the loop went on to parse or run it.
    """
    return ANSWER_MARK not in text and CODE_BLOCK.search(text) is None and TOOL_CALL_BLOCK.search(text) is None


@dataclass(frozen=True)
class Turn:
    """One kept assistant turn, in response-token coordinates (`[start, end)`, clipped to the response).

    - `start`/`end`: the turn's model tokens (a run of mask-1 tokens of the response as the loop built it).
    - `code_start`/`code_end`: its tool call, from the call's first token to the turn's end (None without a call).
    - `call`: the turn holds a complete tool call (the loop's parser read at least one call from it).
    - `answer`: the turn gives a final answer (a `\\boxed{}` outside its reasoning and calls).
    - `failed`: a call of this turn failed with a model error and stays in the trajectory (SAAR off, a position
      SAAR gave up on, a failure SAAR tolerates, Plan B's append); infrastructure errors are not failures of the
      model's code.
    - `void`: SimpleTIR's void turn (`is_void_text` of the turn's text), set for every turn, the last included.
    """

    start: int
    end: int
    code_start: int | None
    code_end: int | None
    call: bool
    answer: bool
    failed: bool
    void: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        return cls(
            start=int(data["start"]),
            end=int(data["end"]),
            code_start=None if data["code_start"] is None else int(data["code_start"]),
            code_end=None if data["code_end"] is None else int(data["code_end"]),
            call=bool(data["call"]),
            answer=bool(data["answer"]),
            failed=bool(data["failed"]),
            void=bool(data["void"]),
        )


def turns_from_field(value: Sequence[Mapping[str, Any]] | None) -> list[Turn]:
    """The turns of an `extra_fields`/record `purify_turns` value (None: a trajectory without turns)."""
    return [Turn.from_dict(item) for item in value or ()]


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int]]:
    """The maximal runs of mask-1 tokens as `[start, end)`: one per kept assistant turn."""
    runs, start = [], None
    for index, value in enumerate(mask):
        if value and start is None:
            start = index
        elif not value and start is not None:
            runs.append((start, index))
            start = None
    if start is not None:
        runs.append((start, len(mask)))
    return runs
