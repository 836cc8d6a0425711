"""`multi_turn.purification` in verl's trainers: the start-up check, the trainer-side modes and the `purify/*` audit.

The rules are `cleaner.purify`'s, computed over the whole batch by `cleaner.verl.purification_batch`; this module
applies them on training batches only (validation never computes advantages):

| trainer | RoC: rows removed | masks before the advantages | void rows loss-masked after them | audit |
|---------|-------------------|-----------------------------|----------------------------------|-------|
| legacy `RayPPOTrainer` | `_balance_batch(batch, metrics)`: verl balances the kept rows, one copy | `ray_trainer.compute_advantage(data, ...)`: `response_mask` | in the same wrapper, after verl's estimator | after it; logged through `ray_trainer.compute_data_metrics` |
| v1 `PPOTrainer` | `_balance_batch(batch, metrics)`: kept keys, the others cleared from TransferQueue | `_compute_advantage(batch, metrics)`: `response_mask` and `loss_mask` in TransferQueue | the same, plus `advantages` | after it, into `metrics` |

A mask zeroed before the advantages takes the row out of its group's mean and std
(`cleaner.verl.group_statistics`); a void row is masked after them, so its reward stays in its group's baseline
as in SimpleTIR. RoC removes the cut rollouts before the batch is balanced, before any forward pass (as
rStar2-Agent filters before its old-log-prob pass); verl needs the batch to divide into data-parallel ranks and
PPO mini-batches: the v1 trainer pads it with its own no-op rows, the legacy trainer (which cannot pad) keeps
just enough cut rows, with an all-zero mask and a group of their own, to reach that multiple. The audit runs in
every mode, SAAR and none included, and only reads; RoC's removed rows enter it untrained. `install(config)` is
called by `CleanerAgentLoopManager` in the trainer's process; it reads the mode once from the config the trainer
was started with.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from cleaner.purify.audit import counts_metrics
from cleaner.purify.config import TRAINER_MODES, Purification, PurificationConfig, PurificationConfigError
from cleaner.purify.failed_calls import FAILED_CALLS_KEY
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY
from cleaner.saar.negatives import NEGATIVE_SAMPLE_KEY
from cleaner.saar.stats import PREFIX as SAAR_PREFIX
from cleaner.verl.purification_audit import batch_audit_counts
from cleaner.verl.purification_batch import RocSelection, mode_masks, roc_penalties, roc_selection, zero_rows

logger = logging.getLogger(__name__)

MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
MANAGER = "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager"
SPLICED_SPANS = SAAR_PREFIX + "spliced_spans"
_MARK = "__cleaner_purification__"

ROC_PREFIX = "purify/roc_"
ROC_PADDING_GROUP = "cleaner-roc-padding"

_config: PurificationConfig | None = None  # the running trainer's mode, set by install()
_rollout_n = 1  # actor_rollout_ref.rollout.n of the running trainer, set by install()
_legacy_audit: dict[str, float] = {}  # the last legacy batch's audit, until compute_data_metrics logs it
# The extra fields of the rows RoC removed from the step's batch: the audit counts them as generated and untrained.
_removed: list[dict] = []


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

        legacy = OmegaConf.select(config, "trainer.use_v1") is False
        if legacy and not OmegaConf.select(config, "trainer.balance_batch", default=True):
            problems.append(
                f"{MULTI_TURN}.purification=roc removes the cut rollouts where the legacy trainer balances its batch: "
                "set trainer.balance_batch=true (or use the v1 trainer, trainer.use_v1=true)"
            )

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


def row_scores(scores: torch.Tensor) -> np.ndarray:
    """Each row's outcome reward: its token-level scores summed (rStar's `token_level_scores.sum(-1)`)."""
    return scores.sum(dim=-1).to(torch.float64).cpu().numpy()


def select_roc(config: PurificationConfig, groups: Sequence[Any], scores: np.ndarray, extra: Sequence[dict | None]):
    penalties = roc_penalties([(fields or {}).get(ROC_COUNTS_KEY) for fields in extra], config)
    return roc_selection(groups, scores, penalties, config, _rollout_n)


def roc_metrics(selection: RocSelection, padding: int) -> dict[str, float]:
    kept = int(selection.kept.sum())
    return {
        ROC_PREFIX + "sampled_rows": float(len(selection.kept)),
        ROC_PREFIX + "kept_rows": float(kept),
        ROC_PREFIX + "removed_rows": float(len(selection.kept) - kept),
        ROC_PREFIX + "rejected_equal_reward_groups": float(selection.rejected_groups),
        ROC_PREFIX + "short_groups": float(selection.short_groups),
        ROC_PREFIX + "padding_rows": float(padding),
    }


def audit(extra: Sequence, masks: Any, advantages: Any) -> dict[str, float]:
    """The `purify/*` audit of a batch's rows and of the rows RoC removed from it this step (generated, never
    trained: an all-zero mask one token wide, which the audit's spans are clipped to)."""
    counts = batch_audit_counts(extra, masks, advantages)
    removed = list(_removed)
    _removed.clear()
    if removed:
        zeros = torch.zeros(len(removed), 1)
        counts = counts + batch_audit_counts(removed, zeros, zeros)
    return counts_metrics(counts, _mode()) if len(extra) + len(removed) else {}


# ---------------------------------------------------------------- legacy RayPPOTrainer


def _legacy_extra(data) -> list[dict]:
    """Per row, the purify/SAAR columns verl made of `extra_fields`."""
    columns = data.non_tensor_batch
    wanted = (TURNS_KEY, GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, SPLICED_SPANS, NEGATIVE_SAMPLE_KEY, FAILED_CALLS_KEY)
    keys = [key for key in wanted if key in columns]
    return [{key: columns[key][row] for key in keys} for row in range(len(data))]


def _turns_column(data) -> Sequence:
    return data.non_tensor_batch[TURNS_KEY] if TURNS_KEY in data.non_tensor_batch else [None] * len(data)


def apply_legacy(config: PurificationConfig, data) -> torch.Tensor | None:
    """Zero the response mask of `data` (a verl DataProto of a training batch) as `config`'s mode says before the
    advantages; return the rows to loss-mask after them (None: none)."""
    return mode_masks(config, data.batch["response_mask"], _turns_column(data)).after_advantages


def loss_mask_rows(data, rows: torch.Tensor) -> None:
    """After the advantages: the rows' response mask and advantages go to 0 (their rewards stayed in the baseline)."""
    for name in ("response_mask", "advantages"):
        zero_rows(data.batch[name], rows)


def batch_multiple(trainer) -> int:
    """The row multiple verl 0.9.1's workers need of a legacy batch: data-parallel ranks and PPO mini-batches
    (each `ppo_mini_batch_size` x `rollout.n` rows), as the v1 trainer's `_get_required_batch_multiple`."""
    config = trainer.config
    multiple = trainer._get_dp_size(trainer.actor_rollout_wg, "actor")
    multiple = math.lcm(multiple, int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * _rollout_n)
    if trainer.use_critic:
        multiple = math.lcm(multiple, int(config.critic.ppo_mini_batch_size) * _rollout_n)
    return multiple


def roc_legacy_rows(config: PurificationConfig, batch, multiple: int) -> tuple[torch.Tensor, dict[str, float]]:
    """RoC's selection on a legacy batch: the rows that stay, in batch order, and the metrics. Enough of the first
    cut rows stay as padding to reach a multiple of `multiple` rows: their masks are zeroed and each gets a group of
    its own, here in `batch`, before any row moves."""
    if "rm_scores" not in batch.batch.keys():
        raise KeyError("purification=roc needs the rewards (rm_scores) in the batch before it is balanced")
    extra = _legacy_extra(batch)
    selection = select_roc(config, batch.non_tensor_batch["uid"], row_scores(batch.batch["rm_scores"]), extra)
    kept = torch.from_numpy(selection.kept)
    kept_rows = int(kept.sum())
    padding = max(1, math.ceil(kept_rows / multiple)) * multiple - kept_rows
    cut = torch.nonzero(~kept).flatten()
    pad = cut[:padding]
    _removed[:] = [extra[row] for row in cut[padding:].tolist()]
    if len(pad):
        batch.batch["response_mask"][pad] = 0
        uid = batch.non_tensor_batch["uid"].copy()
        uid[pad.numpy()] = [f"{ROC_PADDING_GROUP}-{row}" for row in pad.tolist()]
        batch.non_tensor_batch["uid"] = uid
    chosen = kept.clone()
    chosen[pad] = True
    return torch.nonzero(chosen).flatten(), roc_metrics(selection, len(pad))


def balance_stand_in(batch, rows: torch.Tensor):
    """What verl's legacy `_balance_batch` reads of a batch (attention masks and uids), for `rows` only."""
    from verl import DataProto

    return DataProto.from_dict(
        tensors={"attention_mask": batch.batch["attention_mask"][rows]},
        non_tensors={"uid": batch.non_tensor_batch["uid"][rows.numpy()]},
    )


def roc_balance_legacy(balance: Callable, trainer, batch, metrics: dict, *args, **kwargs) -> None:
    """RoC's rows only, in the order verl's `_balance_batch` gives them, with one copy of each kept row: verl
    balances a stand-in holding the kept rows' attention masks and uids, and the order it asks the stand-in to take
    is applied to the batch by verl's own `reorder` (a removal copy followed by verl's reorder copy cost twice)."""
    rows, figures = roc_legacy_rows(_config, batch, batch_multiple(trainer))
    metrics.update(figures)
    stand_in = balance_stand_in(batch, rows)
    orders: list[torch.Tensor] = []
    stand_in.reorder = orders.append
    balance(trainer, stand_in, metrics, *args, **kwargs)
    if len(orders) != 1:
        raise RuntimeError(
            f"purification=roc: verl's _balance_batch reordered the batch {len(orders)} times, expected once "
            "(cleaner.verl.private_api checks the verl version this was written for)"
        )
    batch.reorder(rows[orders[0]])


def _mode() -> Purification | None:
    return _config.mode if _config is not None else None


def legacy_audit(data) -> dict[str, float]:
    mask, advantages = data.batch["response_mask"], data.batch["advantages"]
    return audit(_legacy_extra(data), mask, advantages)


def _wrap_compute_advantage(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_advantage(data, *args, **kwargs):
        # Only the legacy trainer's batch carries the agent loop's columns (v1 has its own hook, below).
        legacy_batch = TURNS_KEY in data.non_tensor_batch
        loss_masked = apply_legacy(_config, data) if legacy_batch and _config is not None else None
        data = original(data, *args, **kwargs)
        if loss_masked is not None:
            loss_mask_rows(data, loss_masked)
        if legacy_batch:
            _legacy_audit.clear()
            _legacy_audit.update(legacy_audit(data))
        return data

    setattr(compute_advantage, _MARK, True)
    return compute_advantage


def _wrap_legacy_balance_batch(original: Callable) -> Callable:
    @functools.wraps(original)
    def _balance_batch(self, batch, metrics, *args, **kwargs):
        if _config is not None and _config.mode is Purification.ROC and TURNS_KEY in batch.non_tensor_batch:
            return roc_balance_legacy(original, self, batch, metrics, *args, **kwargs)
        return original(self, batch, metrics, *args, **kwargs)

    setattr(_balance_batch, _MARK, True)
    return _balance_batch


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


def padded(nested: torch.Tensor) -> torch.Tensor:
    """A jagged TransferQueue field (rows x their lengths) as a zero-padded rows x longest tensor."""
    return nested.to_padded_tensor(0) if nested.is_nested else nested


def jagged_like(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`values` (padded rows x tokens) cut back to the row lengths of the jagged tensor `like`."""
    if not like.is_nested:
        return values
    offsets = like.offsets()
    lengths = offsets.diff()
    inside = torch.arange(values.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    return torch.nested.nested_tensor_from_jagged(values[inside].to(like.dtype), offsets)


def _put(batch, keys: list[str], fields: dict[str, torch.Tensor]) -> None:
    import transfer_queue as tq
    from tensordict import TensorDict

    tq.kv_batch_put(keys=keys, partition_id=batch.partition_id, fields=TensorDict(fields, batch_size=len(keys)))


def _real(batch) -> list[str]:
    return [batch.keys[index] for index in _real_keys(batch)]


def apply_v1(config: PurificationConfig, batch) -> torch.Tensor | None:
    """Before the advantages: rewrite `response_mask` and `loss_mask` in TransferQueue as the mode says; return the
    rows of `_real(batch)` to loss-mask after them (None: none)."""
    import transfer_queue as tq

    from cleaner.verl.trainer_metrics import fetch_extra_fields

    keys = _real(batch)
    if not keys:
        return None
    turns = [fields.get(TURNS_KEY) for fields in fetch_extra_fields(keys, batch.partition_id)]
    nested = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["response_mask"])
    nested = nested["response_mask"]
    change = mode_masks(config, padded(nested), turns)
    if change.before_advantages is not None:
        mask = jagged_like(change.before_advantages, nested)
        _put(batch, keys, {"response_mask": mask, "loss_mask": mask})
    return change.after_advantages


def loss_mask_v1(batch, rows: torch.Tensor) -> None:
    """After the advantages: the rows' `response_mask`, `loss_mask` and `advantages` go to 0 in TransferQueue."""
    import transfer_queue as tq

    keys = [key for key, masked in zip(_real(batch), rows.tolist(), strict=True) if masked]
    if not keys:
        return
    names = ["response_mask", "loss_mask", "advantages"]
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=names)
    _put(batch, keys, {name: jagged_like(torch.zeros_like(padded(data[name])), data[name]) for name in names})


def roc_v1(config: PurificationConfig, batch) -> tuple[Any, dict[str, float]]:
    """`batch` (a KVBatchMeta) without RoC's cut rollouts, which leave TransferQueue; verl pads the rest. A step
    that keeps nothing keeps one cut row with an all-zero mask, so that verl has a row to pad from."""
    import transfer_queue as tq

    from cleaner.verl.trainer_metrics import fetch_extra_fields

    keys = _real(batch)
    if not keys:
        return batch, {}
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["uid", "rm_scores"])
    extra = fetch_extra_fields(keys, batch.partition_id)
    scores = row_scores(padded(data["rm_scores"]))
    selection = select_roc(config, list(data.pop("uid").tolist()), scores, extra)
    kept = [key for key, stays in zip(keys, selection.kept.tolist(), strict=True) if stays]
    cut = [row for row, stays in enumerate(selection.kept.tolist()) if not stays]
    padding = []
    if not kept and cut:
        padding = [keys[cut.pop(0)]]
        mask = tq.kv_batch_get(keys=padding, partition_id=batch.partition_id, select_fields=["response_mask"])
        zero = jagged_like(torch.zeros_like(padded(mask["response_mask"])), mask["response_mask"])
        _put(batch, padding, {"response_mask": zero, "loss_mask": zero})
    if cut:
        removed = [keys[row] for row in cut]
        _removed[:] = [extra[row] for row in cut]
        tq.kv_clear(keys=removed, partition_id=batch.partition_id)
    others = [key for key, tag in zip(batch.keys, batch.tags, strict=True) if tag.get("is_padding", False)]
    return batch.select_keys(kept + padding + others), roc_metrics(selection, len(padding))


def v1_audit(batch) -> dict[str, float]:
    import transfer_queue as tq

    from cleaner.verl.trainer_metrics import fetch_extra_fields

    keys = _real(batch)
    if not keys:
        return {}
    data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["response_mask", "advantages"])
    extra = fetch_extra_fields(keys, batch.partition_id)
    return audit(extra, data["response_mask"], data["advantages"])


def _wrap_v1_compute_advantage(original: Callable) -> Callable:
    @functools.wraps(original)
    def _compute_advantage(self, batch, metrics, *args, **kwargs):
        loss_masked = None
        if _config is not None and _config.mode in TRAINER_MODES:
            loss_masked = apply_v1(_config, batch)
        result = original(self, batch, metrics, *args, **kwargs)
        if loss_masked is not None:
            loss_mask_v1(batch, loss_masked)
        metrics.update(v1_audit(batch))  # the same keys; `batch` carries the padding tags
        return result

    setattr(_compute_advantage, _MARK, True)
    return _compute_advantage


def _wrap_v1_balance_batch(original: Callable) -> Callable:
    @functools.wraps(original)
    def _balance_batch(self, batch, metrics, *args, **kwargs):
        if _config is not None and _config.mode is Purification.ROC and batch.partition_id != "val":
            batch, roc = roc_v1(_config, batch)
            metrics.update(roc)
        return original(self, batch, metrics, *args, **kwargs)

    setattr(_balance_batch, _MARK, True)
    return _balance_batch


# ---------------------------------------------------------------- install


def install(config: DictConfig) -> None:
    """Apply the configured mode and log the audit in both trainers of this process (idempotent)."""
    global _config, _rollout_n
    _config = PurificationConfig.from_multi_turn(OmegaConf.select(config, MULTI_TURN) or {})
    _rollout_n = int(OmegaConf.select(config, "actor_rollout_ref.rollout.n") or 1)
    from cleaner.verl.private_api import require_verl_api

    require_verl_api()
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    if not getattr(ray_trainer.compute_advantage, _MARK, False):
        ray_trainer.compute_advantage = _wrap_compute_advantage(ray_trainer.compute_advantage)
    if not getattr(ray_trainer.compute_data_metrics, _MARK, False):
        ray_trainer.compute_data_metrics = _wrap_compute_data_metrics(ray_trainer.compute_data_metrics)
    if not getattr(ray_trainer.RayPPOTrainer._balance_batch, _MARK, False):
        ray_trainer.RayPPOTrainer._balance_batch = _wrap_legacy_balance_batch(ray_trainer.RayPPOTrainer._balance_batch)
    if not getattr(PPOTrainer._compute_advantage, _MARK, False):
        PPOTrainer._compute_advantage = _wrap_v1_compute_advantage(PPOTrainer._compute_advantage)
    if not getattr(PPOTrainer._balance_batch, _MARK, False):
        PPOTrainer._balance_batch = _wrap_v1_balance_batch(PPOTrainer._balance_batch)
    logger.info("cleaner: purification=%s; purify/* audit hooked into verl's trainers", _config.mode.value)
