"""The record of every failed tool call a trajectory generated, kept or rolled back.

The per-turn record (`purify_turns`) holds only the turns kept in the final response; SAAR's rolled-back attempts
are gone from it. The audit asks what each mode does with the failed calls the policy actually produced, so the
agent loop also records each generated assistant turn that holds at least one call failed with a model error
(`purify_failed_calls` in `extra_fields` and in `cleaner rollout`'s records), with:

- `attempt`: 0 for a first attempt, k for SAAR's k-th resample at its position.
- `categories`: the error category of each failed call of the turn (`cleaner.saar.outcome.ErrorCategory` values).
- `turn_tokens`: the turn's generated tokens (its reasoning and its calls); `call_tokens`: from the call's first
  token to the turn's end (the whole turn when no call boundary is found), the span a negative sample trains.
- `fate`: `kept` (in the final response; `start`/`end` and `code_start`/`code_end` give its range there, clipped
  to the response), `rolled_back` (SAAR cut it out; no range), or `lost` (not in the final response for another
  reason: the trajectory raised and was returned empty).
- `negative_candidate`: a rolled-back first attempt of a position SAAR purified, the attempt `save_negative_samples`
  offers as a negative sample; `negative`: a negative sample was kept from it in this run (trained on its own row
  with the call's tokens only, cleaner.saar.negatives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

FAILED_CALLS_KEY = "purify_failed_calls"

Fate = Literal["kept", "rolled_back", "lost"]
FATES: tuple[Fate, ...] = ("kept", "rolled_back", "lost")


@dataclass(frozen=True)
class FailedCall:
    attempt: int
    categories: tuple[str, ...]
    turn_tokens: int
    call_tokens: int
    fate: Fate
    start: int | None = None
    end: int | None = None
    code_start: int | None = None
    code_end: int | None = None
    negative_candidate: bool = False
    negative: bool = False

    def __post_init__(self) -> None:
        if self.fate not in FATES:
            raise ValueError(f"fate must be one of {FATES}, got {self.fate!r}")
        if not 0 < self.call_tokens <= self.turn_tokens:
            raise ValueError(f"need 0 < call_tokens <= turn_tokens, got {self.call_tokens} and {self.turn_tokens}")
        if (self.fate == "kept") != (self.start is not None and self.end is not None):
            raise ValueError(f"a kept failed call has a response range and no other has one ({self})")
        if self.negative and not self.negative_candidate:
            raise ValueError("a negative sample is kept only from a negative candidate")

    @property
    def kept(self) -> bool:
        return self.fate == "kept"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["categories"] = list(self.categories)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FailedCall:
        def optional(key: str) -> int | None:
            return None if data.get(key) is None else int(data[key])

        return cls(
            attempt=int(data["attempt"]),
            categories=tuple(str(item) for item in data["categories"]),
            turn_tokens=int(data["turn_tokens"]),
            call_tokens=int(data["call_tokens"]),
            fate=str(data["fate"]),  # type: ignore[arg-type]  # checked in __post_init__
            start=optional("start"),
            end=optional("end"),
            code_start=optional("code_start"),
            code_end=optional("code_end"),
            negative_candidate=bool(data["negative_candidate"]),
            negative=bool(data["negative"]),
        )


def failed_calls_from_field(value: Sequence[Mapping[str, Any]] | None) -> list[FailedCall]:
    """The failed calls of an `extra_fields`/record `purify_failed_calls` value (None: none recorded)."""
    return [FailedCall.from_dict(item) for item in value or ()]
