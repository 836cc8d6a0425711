"""`multi_turn.purification` in verl's trainers: the start-up check, the trainer-side modes and the `purify/*` audit.

The rules are `cleaner.purify`'s; this module applies them where each trainer computes advantages, on training
batches only (validation never computes advantages):

| trainer | hook | mask | audit |
|---------|------|------|-------|
| legacy `RayPPOTrainer` | `ray_trainer.compute_advantage(data, ...)` | `data.batch["response_mask"]` zeroed before the estimator | after it, from `data`; logged through `ray_trainer.compute_data_metrics` |
| v1 `PPOTrainer` | `PPOTrainer._compute_advantage(batch, metrics)` | `response_mask` and `loss_mask` rewritten in TransferQueue before verl reads them | after it, from TransferQueue into `metrics` |

A mode that drops a trajectory zeroes its whole mask; `cleaner.verl.group_statistics` then keeps it out of its
group's mean and std, so RoC's kept rollouts form each prompt's GRPO group. The audit runs in every mode, SAAR
and none included, and only reads. `install(config)` is called by `CleanerAgentLoopManager` in the trainer's
process; it reads the mode once from the config the trainer was started with.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from cleaner.purify.config import TRAINER_MODES, Purification, PurificationConfig, PurificationConfigError
from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.masks import Trajectory, purified_masks
from cleaner.purify.turns import GENERATED_TOKENS_KEY, TURNS_KEY, turns_from_field
from cleaner.saar.negatives import NEGATIVE_SAMPLE_KEY
from cleaner.saar.stats import PREFIX as SAAR_PREFIX
from cleaner.verl.purification_audit import batch_audit_metrics

logger = logging.getLogger(__name__)

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
MANAGER = "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager"
SPLICED_SPANS = SAAR_PREFIX + "spliced_spans"
_MARK = "__cleaner_purification__"

_config: PurificationConfig | None = None  # the running trainer's mode, set by install()
_legacy_audit: dict[str, float] = {}  # the last legacy batch's audit, until compute_data_metrics logs it


# ---------------------------------------------------------------- start-up check


def purification_problems(config: DictConfig) -> list[str]:
    """A bad `multi_turn.purification`, or a mode combined with something it cannot work with."""
    multi_turn = OmegaConf.select(config, MULTI_TURN) or {}
    try:
        purification = PurificationConfig.from_multi_turn(multi_turn)
    except PurificationConfigError as error:
        return [str(error)]
    mode = purification.mode
    if mode not in TRAINER_MODES:
        return []
    problems = []
    manager = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.agent_loop_manager_class")
    if manager != MANAGER:
        problems.append(
            f"{MULTI_TURN}.purification={mode.value} is applied by the cleaner trainer hooks: set "
            f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER} (got {manager!r})"
        )
    if mode is Purification.ROC:
        from cleaner.verl.group_statistics import GROUPED_ESTIMATORS

        problems += purification.roc_problems(int(OmegaConf.select(config, "actor_rollout_ref.rollout.n") or 1))
        estimator = str(OmegaConf.select(config, "algorithm.adv_estimator"))
        if estimator not in GROUPED_ESTIMATORS:
            problems.append(
                f"{MULTI_TURN}.purification=roc cuts each prompt's group: algorithm.adv_estimator must be group-"
                f"relative ({', '.join(GROUPED_ESTIMATORS)}), got {estimator!r}"
            )
    if multi_turn.get("save_negative_samples"):
        problems.append(
            f"{MULTI_TURN}.purification={mode.value} cannot be combined with save_negative_samples (negative samples "
            "come from SAAR's rollbacks): unset one of them"
        )
    return problems


# ---------------------------------------------------------------- the rules on a batch


def _score(row_scores: Any) -> float:
    return float(torch.as_tensor(row_scores, dtype=torch.float32).sum())


def purify_masks(
    config: PurificationConfig,
    groups: Sequence[Any],
    scores: Sequence[float],
    extra: Sequence[dict | None],
    masks: Sequence[torch.Tensor],
) -> list[torch.Tensor] | None:
    """The masks `config`'s mode trains `masks` with (None: the mode changes nothing in the trainer)."""
    if config.mode not in TRAINER_MODES:
        return None
    batch = [
        Trajectory(
            group=str(group),
            score=float(score),
            turns=turns_from_field((fields or {}).get(TURNS_KEY)),
            mask=mask.tolist(),
        )
        for group, score, fields, mask in zip(groups, scores, extra, masks, strict=True)
    ]
    purified = purified_masks(config, batch)
    return [torch.tensor(values, dtype=mask.dtype) for values, mask in zip(purified, masks, strict=True)]


# ---------------------------------------------------------------- legacy RayPPOTrainer


def _legacy_extra(data) -> list[dict]:
    """Per row, the purify/SAAR columns verl made of `extra_fields`."""
    columns = data.non_tensor_batch
    wanted = (TURNS_KEY, GENERATED_TOKENS_KEY, SPLICED_SPANS, NEGATIVE_SAMPLE_KEY, FAILED_CALLS_KEY)
    keys = [key for key in wanted if key in columns]
    return [{key: columns[key][row] for key in keys} for row in range(len(data))]


def apply_legacy(config: PurificationConfig, data) -> None:
    """Zero the response mask of `data` (a verl DataProto of a training batch) as `config`'s mode says."""
    mask = data.batch["response_mask"]
    scores = data.batch["token_level_scores"] if "token_level_scores" in data.batch.keys() else None
    if scores is None:
        raise KeyError("purification needs token_level_scores in the batch before advantages")
    purified = purify_masks(
        config,
        data.non_tensor_batch["uid"],
        [_score(row) for row in scores],
        _legacy_extra(data),
        list(mask),
    )
    if purified is not None:
        data.batch["response_mask"] = torch.stack(purified).to(mask.device)


def _mode() -> Purification | None:
    return _config.mode if _config is not None else None


def legacy_audit(data) -> dict[str, float]:
    mask, advantages = data.batch["response_mask"], data.batch["advantages"]
    return batch_audit_metrics(_legacy_extra(data), mask, advantages, _mode())


def _wrap_compute_advantage(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_advantage(data, *args, **kwargs):
        # Only the legacy trainer's batch carries the agent loop's columns (v1 has its own hook, below).
        legacy_batch = TURNS_KEY in data.non_tensor_batch
        if legacy_batch and _config is not None:
            apply_legacy(_config, data)
        data = original(data, *args, **kwargs)
        if legacy_batch:
            _legacy_audit.clear()
            _legacy_audit.update(legacy_audit(data))
        return data

    setattr(compute_advantage, _MARK, True)
    return compute_advantage


def _wrap_compute_data_metrics(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        metrics.update(_legacy_audit)
        _legacy_audit.clear()
        return metrics

    setattr(compute_data_metrics, _MARK, True)
    return compute_data_metrics


# ---------------------------------------------------------------- v1 PPOTrainer (TransferQueue)


def _real_keys(batch) -> list[int]:
    return [index for index, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]


def _nested(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)


def apply_v1(config: PurificationConfig, batch) -> None:
    """Rewrite `response_mask` and `loss_mask` in TransferQueue for the rows of `batch` the mode changes."""
    import transfer_queue as tq
    from tensordict import TensorDict

    from cleaner.verl.trainer_metrics import fetch_extra_fields

    keys = [batch.keys[index] for index in _real_keys(batch)]
    if not keys:
        return
    data = tq.kv_batch_get(
        keys=keys, partition_id=batch.partition_id, select_fields=["uid", "rm_scores", "response_mask"]
    )
    masks = list(data["response_mask"].unbind(0))
    purified = purify_masks(
        config,
        list(data.pop("uid").tolist()),
        [_score(row) for row in data["rm_scores"].unbind(0)],
        fetch_extra_fields(keys, batch.partition_id),
        masks,
    )
    if purified is None:
        return
    fields = TensorDict({"response_mask": _nested(purified), "loss_mask": _nested(purified)}, batch_size=len(keys))
    tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=fields)


def v1_audit(batch) -> dict[str, float]:
    import transfer_queue as tq

    from cleaner.verl.trainer_metrics import fetch_extra_fields

    keys = [batch.keys[index] for index in _real_keys(batch)]
    if not keys:
        return {}
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["response_mask", "advantages"])
    extra = fetch_extra_fields(keys, batch.partition_id)
    return batch_audit_metrics(extra, data["response_mask"], data["advantages"], _mode())


def _wrap_v1_compute_advantage(original: Callable) -> Callable:
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        if _config is not None and _config.mode in TRAINER_MODES:
            apply_v1(_config, batch)
        result = original(self, batch, metrics, *args, **kwargs)
        metrics.update(v1_audit(batch))  # the same keys; `batch` carries the padding tags
        return result

    setattr(_compute_advantage, _MARK, True)
    return _compute_advantage


# ---------------------------------------------------------------- install


def install(config: DictConfig) -> None:
    """Apply the configured mode and log the audit in both trainers of this process (idempotent)."""
    global _config
    _config = PurificationConfig.from_multi_turn(OmegaConf.select(config, MULTI_TURN) or {})
    from cleaner.verl.private_api import require_verl_api

    require_verl_api()
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    if not getattr(ray_trainer.compute_advantage, _MARK, False):
        ray_trainer.compute_advantage = _wrap_compute_advantage(ray_trainer.compute_advantage)
    if not getattr(ray_trainer.compute_data_metrics, _MARK, False):
        ray_trainer.compute_data_metrics = _wrap_compute_data_metrics(ray_trainer.compute_data_metrics)
    if not getattr(PPOTrainer._compute_advantage, _MARK, False):
        PPOTrainer._compute_advantage = _wrap_v1_compute_advantage(PPOTrainer._compute_advantage)
    logger.info("cleaner: purification=%s; purify/* audit hooked into verl's trainers", _config.mode.value)
