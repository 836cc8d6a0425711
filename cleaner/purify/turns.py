"""The per-turn record of a trajectory: one entry per assistant turn kept in the final response.

The agent loop writes it into `extra_fields` (`purify_turns`, with `purify_generated_tokens`) and `cleaner rollout`
into each trajectory record, so the masks, RoC's penalties and the audit are computed from the same facts in the
trainer and over recorded trajectories.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TURNS_KEY = "purify_turns"
# Every token the server generated for the trajectory: kept turns, plus first attempts and resamples SAAR cut.
GENERATED_TOKENS_KEY = "purify_generated_tokens"
EXTRA_FIELD_KEYS = (TURNS_KEY, GENERATED_TOKENS_KEY)


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
    """

    start: int
    end: int
    code_start: int | None
    code_end: int | None
    call: bool
    answer: bool
    failed: bool

    @property
    def void(self) -> bool:
        """SimpleTIR's void turn: neither a complete code block nor a final answer."""
        return not self.call and not self.answer

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
