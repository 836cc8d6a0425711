"""Keep trajectories that train nothing out of their group's statistics: the advantages and DAPO's group filter.

`drop_infra_error_trajectories` (and a trajectory whose agent loop failed) leaves a trajectory in the batch with
an all-zero response mask: verl's loss ignores its tokens, but group-relative estimators (GRPO, RLOO, ...)
still put its reward into the group's mean and std, so a judge outage shifts the advantages of the healthy
samples of the same prompt. `install()` wraps each such estimator so that a row with no trained token is its
own group: it leaves its group's mean and std, and its own advantage stays 0 (its mask is 0).

A group that lost rows this way and keeps a single trained row has no baseline left: verl's single-sample rule
would make that row's raw reward its advantage. Its advantage is set to 0 instead (the group teaches nothing,
as a group whose rewards are all equal); `rollback/groups_with_one_trained_row` counts such groups per step.
Groups that were one row from the start (`rollout.n=1`) keep verl's rule.

DAPO dynamic sampling (`algorithm.filter_groups`, v1 trainer) evicts a finished group whose metric is equal on
all its rows and generates another in its place. It reads every row, so the group [1, 1, 1, dropped 0] would
pass, train nothing and take the slot a refill should have had. `install()` wraps verl's classification so a
group holding an untrained row is classified on its trained rows only: evicted when they are all equal or
fewer than two (no group signal, as above), kept otherwise. verl's table of evicted groups by metric value
lists it under its trained rows' value (a group without any trained row under its lowest value).

The hooks are verl's estimator registry (`core_algos.ADV_ESTIMATOR_REGISTRY`), plus the module attribute
`core_algos.compute_grpo_outcome_advantage`, which both of verl's trainers call directly for `grpo` instead of
going through the registry, and `ReplayBuffer._dapo_filtered_keys` (the v1 trainer's built-in sampler; a custom
sampler owns its filtering). The cleaner agent-loop manager installs them in the trainer's process.
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
# verl 0.9.1's v1 sampler: the method wrapped, and the parameters and attributes the wrapper relies on.
DAPO_CLASSIFIER = "_dapo_filtered_keys"
DAPO_CLASSIFIER_PARAMETERS = ("self", "partition_id")


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


def lone_trained_rows(index: Sequence[Any], trained: Sequence[bool]) -> list[int]:
    """The rows that are the only trained row of a group that also holds untrained rows."""
    groups: dict[str, list[int]] = {}
    for row, value in enumerate(index):
        groups.setdefault(str(value), []).append(row)
    lone = []
    for rows in groups.values():
        kept = [row for row in rows if trained[row]]
        if len(kept) == 1 and len(rows) > 1:
            lone.append(kept[0])
    return lone


def _zeroed(advantages: torch.Tensor, rows: list[int]) -> torch.Tensor:
    advantages = advantages.clone()
    advantages[rows] = 0
    return advantages


def without_untrained_rows(estimator: Callable) -> Callable:
    """`estimator` (a verl advantage estimator) computed with `group_index` in place of its `index`."""
    if getattr(estimator, _MARK, False):
        return estimator
    signature = inspect.signature(estimator)

    @functools.wraps(estimator)
    def wrapper(*args: Any, **kwargs: Any):
        bound = signature.bind_partial(*args, **kwargs)
        index, mask = bound.arguments.get("index"), bound.arguments.get("response_mask")
        if index is None or mask is None:
            return estimator(*bound.args, **bound.kwargs)
        bound.arguments["index"] = group_index(index, mask)
        advantages, returns = estimator(*bound.args, **bound.kwargs)
        lone = lone_trained_rows(index, mask.bool().any(dim=-1).tolist())
        if not lone:
            return advantages, returns
        zeroed = _zeroed(advantages, lone)
        return zeroed, zeroed if returns is advantages else _zeroed(returns, lone)

    setattr(wrapper, _MARK, True)
    return wrapper


def classify_on_trained_rows(values: Sequence[float], trained: Sequence[bool]) -> float | None:
    """DAPO's classification of a group holding an untrained row: the metric value it is evicted under, or None
    to keep it. Evicted when its trained rows number fewer than two or all share one value."""
    kept = [value for value, has_tokens in zip(values, trained, strict=True) if has_tokens]
    if not kept:
        return min(values)
    if len(kept) == 1 or float(np.std(kept)) == 0.0:
        return kept[0]
    return None


def _uid(key: str) -> str:
    return key.split("_")[0]  # verl's TransferQueue keys: {uid}_{session_id}_{index}


def _classify_groups_with_untrained_rows(buffer: Any, partition_id: str) -> None:
    """Put the classification of each newly finished group that holds an untrained row into verl's cache, so
    verl's own classifier (which classifies only groups not cached yet) leaves those groups alone."""
    import transfer_queue as tq

    cache = buffer._dapo_classification_cache[partition_id]
    new_uids = buffer.finished_keys[partition_id] - cache.keys()
    keys = [key for key in buffer.partitions[partition_id] if _uid(key) in new_uids]
    if not keys:
        return
    masks = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["response_mask"])["response_mask"]
    trained = {key: bool(mask.any()) for key, mask in zip(keys, masks.unbind(0), strict=True)}
    affected = {_uid(key) for key, has_tokens in trained.items() if not has_tokens}
    keys = [key for key in keys if _uid(key) in affected]
    if not keys:
        return
    by_reward = buffer.filter_groups_metric == "reward"  # verl's FILTER_GROUPS_REWARD_METRIC: the summed rm_scores
    field = "rm_scores" if by_reward else "extra_fields"
    rows = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=[field])[field]
    values: dict[str, list[float]] = {}
    flags: dict[str, list[bool]] = {}
    for key, row in zip(keys, rows.unbind(0) if by_reward else list(rows), strict=True):
        if by_reward:
            value = float(row.sum().item())
        else:
            extra = getattr(row, "data", row)
            info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
            if buffer.filter_groups_metric not in info:
                affected.discard(_uid(key))  # verl's classifier raises, naming the group
                continue
            value = float(info[buffer.filter_groups_metric])
        values.setdefault(_uid(key), []).append(value)
        flags.setdefault(_uid(key), []).append(trained[key])
    for uid in affected:
        cache[uid] = classify_on_trained_rows(values[uid], flags[uid])


def on_trained_rows(classifier: Callable) -> Callable:
    """`ReplayBuffer._dapo_filtered_keys` with groups holding untrained rows classified on their trained rows."""
    if getattr(classifier, _MARK, False):
        return classifier

    @functools.wraps(classifier)
    def _dapo_filtered_keys(self, partition_id: str):
        if partition_id != "val" and self.filter_groups_metric is not None:
            _classify_groups_with_untrained_rows(self, partition_id)
        return classifier(self, partition_id)

    setattr(_dapo_filtered_keys, _MARK, True)
    return _dapo_filtered_keys


def _install_dapo_filter() -> None:
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    classifier = getattr(ReplayBuffer, DAPO_CLASSIFIER, None)
    parameters = tuple(inspect.signature(classifier).parameters) if classifier is not None else None
    if parameters != DAPO_CLASSIFIER_PARAMETERS:
        raise RuntimeError(
            f"verl's ReplayBuffer.{DAPO_CLASSIFIER}{parameters or ' (missing)'} is not the verl 0.9.1 method "
            f"{DAPO_CLASSIFIER}{DAPO_CLASSIFIER_PARAMETERS} that cleaner.verl.group_statistics wraps"
        )
    setattr(ReplayBuffer, DAPO_CLASSIFIER, on_trained_rows(classifier))


def install() -> None:
    """Wrap verl's group-relative estimators and DAPO's group classification in this process (idempotent)."""
    from verl.trainer.ppo import core_algos

    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    for name in GROUPED_ESTIMATORS:
        if name in registry:
            registry[name] = without_untrained_rows(registry[name])
    core_algos.compute_grpo_outcome_advantage = without_untrained_rows(core_algos.compute_grpo_outcome_advantage)
    _install_dapo_filter()
    logger.info(
        "cleaner: trajectories without trained tokens are left out of group statistics (%s) and of DAPO's group filter",
        GROUPED_ESTIMATORS,
    )
