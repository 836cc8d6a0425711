"""SAAR on vs off as a paired comparison: the two trajectories of one problem, sample and seed.

`cleaner rollout` gives sample i of problem p the same seed in both modes, and each generate call of a
trajectory its own seed derived from it. When the server computes each request alone (one llama.cpp slot,
one trajectory in flight), both modes sample the same tokens up to the first failing tool call, and SAAR's
first resample sees the same context and seed as SAAR off's next turn. A pair then differs only by what
SAAR did from that call on, so on - off is SAAR's effect, not sampling noise from the first turn.
`shares_prefix` checks this per pair; pairs that diverged earlier (batched numerics, another server) still
count, as independent draws for the same problem and seed.

Differences are means over pairs with a 95 % Student-t interval. Pure: records in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist, fmean, stdev
from typing import Any

from cleaner.saar.aggregate import model_errors
from cleaner.saar.stats import PREFIX
from cleaner.trajectory.summary import is_correct

Record = Mapping[str, Any]


@dataclass(frozen=True)
class Pair:
    on: Record
    off: Record

    @property
    def key(self) -> str:
        return f"{self.on['problem_id']}#{self.on['sample']}"

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self.on.get(PREFIX + "rollback_events") or [])

    @property
    def saar_acted(self) -> bool:
        return bool(self.events)


def pair_up(records: Iterable[Record]) -> list[Pair]:
    """SAAR-on and SAAR-off records of the same problem and sample, in problem order; unmatched ones are left out."""
    by_mode: dict[bool, dict[tuple[str, int], Record]] = {True: {}, False: {}}
    for record in records:
        mode = by_mode[bool(record["saar"])]
        key = (str(record["problem_id"]), int(record["sample"]))
        if key in mode:
            raise ValueError(f"two SAAR-{'on' if record['saar'] else 'off'} records for {key[0]}#{key[1]}")
        mode[key] = record
    return [Pair(on, by_mode[False][key]) for key, on in by_mode[True].items() if key in by_mode[False]]


def kept_errors(record: Record) -> int:
    """Model-error tool calls left in the final trajectory (those a recovered rollback removed are not)."""
    return model_errors(record) - int(record[PREFIX + "purified_errors"])


def _common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def _turn_start(record: Record, turn: int) -> int:
    """First response token of assistant turn `turn` (0-based), or the response length if there is none."""
    for piece in record["pieces"]:
        if piece["role"] == "assistant" and piece["turn"] == turn:
            return int(piece["start"])
    return len(record["response_ids"])


def shares_prefix(pair: Pair) -> bool:
    """Both modes sampled the same tokens up to the turn where SAAR first acted (the whole response if never)."""
    on, off = list(pair.on["response_ids"]), list(pair.off["response_ids"])
    if not pair.saar_acted:
        return on == off
    first_position = min(int(event["position"]) for event in pair.events)
    return _common_prefix(on, off) >= _turn_start(pair.on, first_position)


# Below this many pairs no interval is given: the t quantile approximation (and the interval) is too loose.
MIN_PAIRS_FOR_INTERVAL = 4


def t_quantile_975(df: int) -> float:
    """97.5 % quantile of Student's t (Cornish-Fisher expansion around the normal; within 1 % from df = 3)."""
    if df < MIN_PAIRS_FOR_INTERVAL - 1:
        raise ValueError(f"the approximation needs at least {MIN_PAIRS_FOR_INTERVAL - 1} degrees of freedom, got {df}")
    z = NormalDist().inv_cdf(0.975)
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


@dataclass(frozen=True)
class PairedDifference:
    metric: str
    on: float  # mean over pairs, SAAR on
    off: float
    difference: float  # mean of (on - off) over pairs
    half_width: float | None  # of the 95 % interval of `difference`; None below MIN_PAIRS_FOR_INTERVAL pairs

    def interval(self) -> tuple[float, float] | None:
        if self.half_width is None:
            return None
        return self.difference - self.half_width, self.difference + self.half_width


def paired_difference(metric: str, on: list[float], off: list[float]) -> PairedDifference:
    if len(on) != len(off) or not on:
        raise ValueError(
            f"{metric}: need the same number (> 0) of SAAR-on and SAAR-off values, got {len(on)}/{len(off)}"
        )
    differences = [a - b for a, b in zip(on, off)]
    half_width = None
    if len(differences) >= MIN_PAIRS_FOR_INTERVAL:
        half_width = t_quantile_975(len(differences) - 1) * stdev(differences) / math.sqrt(len(differences))
    return PairedDifference(metric, fmean(on), fmean(off), fmean(differences), half_width)


# (metric, value of one record): what a reader of the demo compares between the modes.
PAIRED_METRICS: tuple[tuple[str, Callable[[Record], float]], ...] = (
    ("accuracy", lambda r: float(is_correct(r))),
    ("tool errors kept / trajectory", lambda r: float(kept_errors(r))),
    ("tool errors sampled / trajectory", lambda r: float(model_errors(r))),
    ("response tokens / trajectory", lambda r: float(r[PREFIX + "response_tokens"])),
    ("generated tokens / trajectory", lambda r: float(r["timing"]["generated_tokens"])),
)


def paired_differences(pairs: list[Pair]) -> list[PairedDifference]:
    return [
        paired_difference(name, [value(p.on) for p in pairs], [value(p.off) for p in pairs])
        for name, value in PAIRED_METRICS
    ]


@dataclass(frozen=True)
class ActedPair:
    """One pair where SAAR rolled back: what it did, and how the same start went without it."""

    key: str
    errors: list[str]  # the first failure of each position: its exception type, else its category ("timeout")
    modes: list[str]  # shallow / deep / failed, per position
    on_correct: bool
    off_correct: bool
    on_kept_errors: int
    off_kept_errors: int
    shares_prefix: bool


def acted_pairs(pairs: list[Pair]) -> list[ActedPair]:
    return [
        ActedPair(
            key=pair.key,
            errors=[event.get("exception_type") or event["error_category"] for event in pair.events],
            modes=[str(event["mode"]) for event in pair.events],
            on_correct=is_correct(pair.on),
            off_correct=is_correct(pair.off),
            on_kept_errors=kept_errors(pair.on),
            off_kept_errors=kept_errors(pair.off),
            shares_prefix=shares_prefix(pair),
        )
        for pair in pairs
        if pair.saar_acted
    ]
