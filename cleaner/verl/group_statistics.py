"""Keep trajectories that train nothing out of their group's advantage statistics.

`drop_infra_error_trajectories` (and a trajectory whose agent loop failed) leaves a trajectory in the batch with
an all-zero response mask: verl's loss ignores its tokens, but group-relative estimators (GRPO, RLOO, ...)
still put its reward into the group's mean and std, so a judge outage shifts the advantages of the healthy
samples of the same prompt. `install()` wraps each such estimator so that a row with no trained token is its
own group: it leaves its group's mean and std, and its own advantage stays 0 (its mask is 0).

The hook is verl's estimator registry (`core_algos.ADV_ESTIMATOR_REGISTRY`), plus the module attribute
`core_algos.compute_grpo_outcome_advantage`, which both of verl's trainers call directly for `grpo` instead of
going through the registry. A group that keeps one healthy sample gets verl's single-sample rule (mean 0,
std 1). The cleaner agent-loop manager installs it in the trainer's process.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

# verl 0.9.1's estimators that normalise a reward by the other samples of its `index` group.
GROUPED_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gpg",
    "reinforce_plus_plus_baseline",
)
UNTRAINED_GROUP = "cleaner-untrained-row"
_MARK = "__cleaner_group_statistics__"


def group_index(index: Sequence[Any], response_mask: torch.Tensor) -> Sequence[Any]:
    """`index` with every row whose response mask is all zero moved into a group of its own."""
    trained = response_mask.bool().any(dim=-1).tolist()
    if all(trained):
        return index
    # Strings throughout, so that verl's vectorized estimators can still sort the group ids.
    regrouped = np.array([str(value) for value in index], dtype=object)
    for row, has_tokens in enumerate(trained):
        if not has_tokens:
            regrouped[row] = f"{UNTRAINED_GROUP}-{row}"
    return regrouped


def without_untrained_rows(estimator: Callable) -> Callable:
    """`estimator` (a verl advantage estimator) computed with `group_index` in place of its `index`."""
    if getattr(estimator, _MARK, False):
        return estimator
    signature = inspect.signature(estimator)

    @functools.wraps(estimator)
    def wrapper(*args: Any, **kwargs: Any):
        bound = signature.bind_partial(*args, **kwargs)
        index, mask = bound.arguments.get("index"), bound.arguments.get("response_mask")
        if index is not None and mask is not None:
            bound.arguments["index"] = group_index(index, mask)
        return estimator(*bound.args, **bound.kwargs)

    setattr(wrapper, _MARK, True)
    return wrapper


def install() -> None:
    """Wrap verl's group-relative estimators in this process (idempotent)."""
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for name in GROUPED_ESTIMATORS:
        if name in registry:
            registry[name] = without_untrained_rows(registry[name])
    core_algos.compute_grpo_outcome_advantage = without_untrained_rows(core_algos.compute_grpo_outcome_advantage)
    logger.info(
        "cleaner: trajectories without trained tokens are left out of group statistics (%s)", GROUPED_ESTIMATORS
    )
