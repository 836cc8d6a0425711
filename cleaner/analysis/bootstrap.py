"""Ratio-of-sums estimates with a bootstrap interval over prompts.

Every purification figure is a ratio of sums over trajectories (tokens over tokens, trajectories over
trajectories). The trajectories of one prompt are not independent: they share the prompt's difficulty, and a
prompt's GRPO advantages and RoC's selection depend on its whole group. So the unit resampled is the prompt:
each bootstrap draw takes as many prompts as there are, with replacement, and recomputes the ratio of their
summed numerators and denominators (the percentile interval of those draws). Pure: numbers in, numbers out.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from cleaner.saar.offpolicy_summary import quantile

# The 95 % percentile interval.
LOW_QUANTILE, HIGH_QUANTILE = 0.025, 0.975
DEFAULT_RESAMPLES = 2000
# Below this many prompts no interval is given: a bootstrap over two or three clusters says nothing.
MIN_PROMPTS_FOR_INTERVAL = 4


@dataclass(frozen=True)
class Tally:
    """One prompt's contribution to a ratio: what it adds to the numerator and to the denominator."""

    numerator: float
    denominator: float


@dataclass(frozen=True)
class Estimate:
    """Σ numerator / Σ denominator over the prompts, with its 95 % bootstrap interval over prompts.

    `value` is None when the denominator sums to zero (the figure does not apply, e.g. no positive-advantage
    token); `low`/`high` are None below MIN_PROMPTS_FOR_INTERVAL prompts. `size` is the summed denominator
    (the tokens or trajectories the ratio is over), `prompts` the clusters resampled.
    """

    value: float | None
    low: float | None
    high: float | None
    size: float
    prompts: int


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def resample_plan(prompts: int, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> list[list[int]]:
    """The prompt indices of each bootstrap draw. One plan is shared by every figure and mode of a table, so
    their intervals come from the same draws (and a table is reproducible from its seed)."""
    rng = random.Random(seed)
    return [[rng.randrange(prompts) for _ in range(prompts)] for _ in range(resamples)]


def estimate(tallies: Sequence[Tally], plan: Sequence[Sequence[int]]) -> Estimate:
    """The ratio over `tallies` (one per prompt) and its bootstrap interval under `plan`.

    Draws whose resampled denominator is zero have no ratio and are left out of the percentiles.
    """
    numerator = sum(t.numerator for t in tallies)
    denominator = sum(t.denominator for t in tallies)
    value = _ratio(numerator, denominator)
    low = high = None
    if value is not None and len(tallies) >= MIN_PROMPTS_FOR_INTERVAL:
        if any(len(indices) != len(tallies) for indices in plan):
            raise ValueError(f"the resample plan does not draw {len(tallies)} prompts per resample")
        draws = []
        for indices in plan:
            ratio = _ratio(sum(tallies[i].numerator for i in indices), sum(tallies[i].denominator for i in indices))
            if ratio is not None:
                draws.append(ratio)
        if draws:
            low, high = quantile(draws, LOW_QUANTILE), quantile(draws, HIGH_QUANTILE)
    return Estimate(value, low, high, denominator, len(tallies))
