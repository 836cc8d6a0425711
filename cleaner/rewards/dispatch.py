"""`compute_score`: verl's custom reward function, dispatching on `data_source`."""

from __future__ import annotations

from enum import Enum
from typing import Any

from cleaner.rewards.code_reward import score_code
from cleaner.rewards.config import RewardConfig
from cleaner.rewards.gpqa_reward import score_gpqa
from cleaner.rewards.math_reward import score_math
from cleaner.rewards.result import RewardResult
from cleaner.saar.stats import SCALAR_EXTRA_FIELD_KEYS
from cleaner.source_kinds import TaskKind, known_patterns, source_rule


class RewardKind(str, Enum):
    MATH = "math"
    GPQA = "gpqa"
    CODE = "code"


# The scorer of each task kind (the kind of a data_source: cleaner.source_kinds, shared with data preparation).
REWARD_OF_TASK: dict[TaskKind, RewardKind] = {
    TaskKind.MATH: RewardKind.MATH,
    TaskKind.AIME: RewardKind.MATH,
    TaskKind.GPQA: RewardKind.GPQA,
    TaskKind.CODE: RewardKind.CODE,
    TaskKind.LCB: RewardKind.CODE,
}


def reward_kind(
    data_source: str, extra_sources: dict[str, str] | None = None, default_source: str | None = None
) -> RewardKind:
    """Which scorer a data source uses. An unknown source is a configuration error unless `default_source` names
    the scorer for every unknown source."""
    extra_sources = extra_sources or {}
    if data_source in extra_sources:
        try:
            return RewardKind(extra_sources[data_source])
        except ValueError:
            kinds = [kind.value for kind in RewardKind]
            mapped = extra_sources[data_source]
            raise ValueError(f"data_sources maps {data_source!r} to {mapped!r}; use one of {kinds}") from None
    rule = source_rule(data_source)
    if rule is not None:
        return REWARD_OF_TASK[rule.kind]
    if default_source is not None:
        return RewardKind(default_source)
    raise ValueError(
        f"no reward for data_source {data_source!r}: it matches none of {known_patterns()}; "
        "map it with the reward option data_sources={<name>: math|gpqa|code}, or set default_source=math to score "
        "every unknown source as math, as the reference implementation did"
    )


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one response. Returns `RewardResult.to_dict()`: score, acc, pred, reason, infra_error, tests_*.

    Model output never raises; an unknown option, data source or malformed ground truth does (ValueError).
    """
    config = RewardConfig.from_kwargs(kwargs)
    data_source = str(data_source)
    kind = reward_kind(data_source, config.data_sources, config.default_source)
    try:
        result = await _score(kind, str(solution_str), ground_truth, config)
    except ValueError as exc:
        raise ValueError(f"data_source {data_source!r}: {exc}") from exc
    return {**result.to_dict(), **saar_statistics(extra_info)}


def saar_statistics(extra_info: dict[str, Any] | None) -> dict[str, Any]:
    """The agent loop's scalar `saar_*` statistics, when verl passed them in `extra_info`.

    Returned with the score, they become reward_extra_info columns: verl then logs them per data source in
    validation and writes them into its generation dumps, which `cleaner eval` summarises. They are present
    for every row of a batch or for none, as verl needs (the SAAR loop sets all of them on every trajectory).
    """
    if not extra_info:
        return {}
    return {key: extra_info[key] for key in SCALAR_EXTRA_FIELD_KEYS if key in extra_info}


async def _score(kind: RewardKind, solution_str: str, ground_truth: Any, config: RewardConfig) -> RewardResult:
    if kind is RewardKind.MATH:
        return await score_math(solution_str, ground_truth, config)
    if kind is RewardKind.GPQA:
        return await score_gpqa(solution_str, ground_truth)
    return await score_code(solution_str, ground_truth, config)
