"""Put the rollback/* and tool_calls/* metrics into what verl's trainers log, for training and validation;
for training also `critic/score/acc` (the share of fully correct trajectories, as the reference logs it; negative
samples are not trajectories), `rollback/is_gate/*` (the scored splices' log IS ratios, from the rollback events:
`cleaner.saar.offpolicy_summary.gate_metrics`), `rollback/groups_with_one_trained_row` (groups whose other rows
had their loss mask zeroed: `cleaner.verl.group_statistics` gives them zero advantages) and, with rollout
log-probs on, `rollback/offpolicy/*` (cleaner.verl.offpolicy_metrics: recomputed against rollout log-probs on
spliced and on the other trained tokens).

verl 0.9.1 has no extension point that carries per-trajectory agent-loop fields into a step's logged
metrics (console, wandb, ... via `Tracking.log`):
- legacy `RayPPOTrainer` (`trainer.use_v1=false`): of the agent-loop manager's output, only
  `meta_info["timing"]` reaches the metrics, renamed `timing_s/<key>`;
- v1 trainer (the default): the manager returns nothing; trajectories go to TransferQueue and
  `_compute_metrics` reads a fixed list of fields from it.

So `install()` wraps, once per process, the places where each trainer has the trajectories in hand,
and adds `cleaner.verl.saar_metrics.aggregate_saar_metrics` of their `saar_*` stats to the metrics it returns:

| trainer | training                                          | validation (prefix `val-aux/`)                   |
|---------|---------------------------------------------------|--------------------------------------------------|
| legacy  | `ray_trainer.compute_data_metrics(batch)`          | `RayPPOTrainer._validate`, rows from each        |
|         | (the batch holds the `saar_*` columns)             | unpadded batch given to `extract_reward`         |
| v1      | `PPOTrainer._compute_metrics(batch: KVBatchMeta)`  | `PPOTrainer._validate`, rows fetched from        |
|         | rows fetched from TransferQueue `extra_fields`     | TransferQueue for each batch the replay buffer   |
|         |                                                   | samples (before the trainer clears it)           |

The wrappers call verl's original first and only add keys (they read the batch, never write it, so the loss is
the same with or without them); batches without `saar_*` stats add nothing.
`install()` first checks that the installed verl still has these methods with the expected parameters
(`cleaner.verl.private_api`), so a verl upgrade fails at start-up with a message naming each difference.
`install()` is called by `cleaner.verl.agent_loop_manager.CleanerAgentLoopManager`, which verl constructs in
the trainer's own process, so choosing that manager class is the single opt-in.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from cleaner.saar.negatives import NEGATIVE_SAMPLE_KEY
from cleaner.saar.offpolicy_summary import gate_metrics, scored_splices, scoring_failure_metrics
from cleaner.saar.stats import PREFIX
from cleaner.verl.group_statistics import lone_trained_rows
from cleaner.verl.offpolicy_metrics import OFFPOLICY, OffpolicyRow, offpolicy_metrics
from cleaner.verl.private_api import require_verl_api
from cleaner.verl.saar_metrics import VALIDATION_PREFIX, aggregate_saar_metrics, rows_from_columns, score_acc_metrics

logger = logging.getLogger(__name__)

SPLICED_SPANS = PREFIX + "spliced_spans"
ROLLBACK_EVENTS = PREFIX + "rollback_events"
IS_GATE = "rollback/is_gate/"
ONE_TRAINED_ROW = "rollback/groups_with_one_trained_row"
OLD_LOG_PROBS, ROLLOUT_LOG_PROBS, RESPONSE_MASK = "old_log_probs", "rollout_log_probs", "response_mask"

# Attribute set on every wrapper, so `install()` is idempotent and tests can find the original.
_MARK = "__cleaner_saar_metrics__"


def _is_installed(function: Callable) -> bool:
    return getattr(function, _MARK, False)


def _mark(wrapper: Callable) -> Callable:
    setattr(wrapper, _MARK, True)
    return wrapper


def _gate_metrics(events_per_row) -> dict[str, float]:
    """`rollback/is_gate/*` and `rollback/offpolicy/scoring_failed*` from each trajectory's rollback events (rows
    without events add none)."""
    events = [event for row_events in events_per_row if row_events is not None for event in row_events]
    metrics = {IS_GATE + name: value for name, value in gate_metrics(scored_splices(events)).items()}
    metrics.update({OFFPOLICY + name: value for name, value in scoring_failure_metrics(events).items()})
    return metrics


def _one_trained_row_metric(uids, trained) -> dict[str, float]:
    return {ONE_TRAINED_ROW: float(len(lone_trained_rows(uids, trained)))}


# ---------------------------------------------------------------- legacy RayPPOTrainer


def _wrap_compute_data_metrics(original: Callable) -> Callable:
    @functools.wraps(original)
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        metrics.update(aggregate_saar_metrics(rows_from_columns(batch.non_tensor_batch)))
        # The reward's extra info (acc, pred, ...) is a column of the batch by now (verl's extract_reward).
        metrics.update(score_acc_metrics(batch.non_tensor_batch.get("acc", [])))
        metrics.update(offpolicy_metrics(_legacy_offpolicy_rows(batch)))
        columns = batch.non_tensor_batch
        if ROLLBACK_EVENTS in columns:  # a cleaner batch
            metrics.update(_gate_metrics(columns[ROLLBACK_EVENTS]))
            if "uid" in columns and RESPONSE_MASK in batch.batch.keys():
                trained = batch.batch[RESPONSE_MASK].bool().any(dim=-1).tolist()
                metrics.update(_one_trained_row_metric(columns["uid"], trained))
        return metrics

    return _mark(compute_data_metrics)


def _legacy_offpolicy_rows(batch) -> list[OffpolicyRow]:
    """The batch's SAAR trajectories with both log-probs (none without `calculate_log_probs`)."""
    tensors, spans = batch.batch, batch.non_tensor_batch.get(SPLICED_SPANS)
    if spans is None or any(name not in tensors.keys() for name in (OLD_LOG_PROBS, ROLLOUT_LOG_PROBS, RESPONSE_MASK)):
        return []
    return [
        OffpolicyRow(
            tensors[OLD_LOG_PROBS][row], tensors[ROLLOUT_LOG_PROBS][row], tensors[RESPONSE_MASK][row], spans[row]
        )
        for row in range(len(spans))
        if spans[row] is not None
    ]


# Rows of the validation batches seen while a legacy `_validate` call runs (None outside of one). verl's
# `extract_reward` is a module-level function with no trainer at hand, so the running `_validate` hands it
# this collector through the context.
_validation_rows: ContextVar[list[dict[str, Any]] | None] = ContextVar("cleaner_validation_rows", default=None)


def _wrap_extract_reward(original: Callable) -> Callable:
    @functools.wraps(original)
    def extract_reward(batch, *args, **kwargs):
        rows = _validation_rows.get()
        if rows is not None:
            rows.extend(rows_from_columns(batch.non_tensor_batch))
        return original(batch, *args, **kwargs)

    return _mark(extract_reward)


def _wrap_legacy_validate(original: Callable) -> Callable:
    @functools.wraps(original)
    def _validate(self, merged: bool = False):
        rows: list[dict[str, Any]] = []
        token = _validation_rows.set(rows)
        try:
            result = original(self, merged=merged)
        finally:
            _validation_rows.reset(token)
        # merged=True returns raw per-sample lists for a later merge, not metrics.
        if not merged:
            result.update(aggregate_saar_metrics(rows, prefix=VALIDATION_PREFIX))
        return result

    return _mark(_validate)


def _install_legacy() -> None:
    from verl.trainer.ppo import ray_trainer

    if not _is_installed(ray_trainer.compute_data_metrics):
        ray_trainer.compute_data_metrics = _wrap_compute_data_metrics(ray_trainer.compute_data_metrics)
    if not _is_installed(ray_trainer.extract_reward):
        ray_trainer.extract_reward = _wrap_extract_reward(ray_trainer.extract_reward)
    if not _is_installed(ray_trainer.RayPPOTrainer._validate):
        ray_trainer.RayPPOTrainer._validate = _wrap_legacy_validate(ray_trainer.RayPPOTrainer._validate)


# ---------------------------------------------------------------- v1 PPOTrainer (TransferQueue)


def fetch_extra_fields(keys: list[str], partition_id: str) -> list[dict[str, Any]]:
    """The `extra_fields` dict of each trajectory key, as the v1 agent-loop worker stored it in TransferQueue."""
    import transfer_queue as tq

    if not keys:
        return []
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
    return list(data.pop("extra_fields").tolist())  # as verl reads it


def _sampled_keys(batch) -> list[str]:
    """Keys of a `KVBatchMeta`, leaving out the padding entries verl adds to fill a batch."""
    return [key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)]


def _sampled_rows(batch) -> list[dict[str, Any]]:
    return fetch_extra_fields(_sampled_keys(batch), batch.partition_id)


def _v1_offpolicy_rows(keys: list[str], partition_id: str, rows: list[dict[str, Any]]) -> list[OffpolicyRow]:
    """The SAAR trajectories among `keys` (whose extra_fields are `rows`), with both log-probs from TransferQueue."""
    import transfer_queue as tq

    wanted = [index for index, row in enumerate(rows) if row.get(SPLICED_SPANS) is not None]
    if not wanted:
        return []
    fields = (OLD_LOG_PROBS, ROLLOUT_LOG_PROBS, RESPONSE_MASK)
    data = tq.kv_batch_get(keys=[keys[i] for i in wanted], partition_id=partition_id, select_fields=list(fields))
    old, rollout, mask = (data[name].unbind(0) for name in fields)  # jagged rows, one per key
    return [OffpolicyRow(old[n], rollout[n], mask[n], rows[index][SPLICED_SPANS]) for n, index in enumerate(wanted)]


def _v1_trained(keys: list[str], batch) -> list[bool]:
    """Whether each trajectory has a trained token (its response mask, from TransferQueue)."""
    import transfer_queue as tq

    masks = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=[RESPONSE_MASK])[RESPONSE_MASK]
    return [bool(mask.any()) for mask in masks.unbind(0)]


def _rollout_log_probs_on(config) -> bool:
    from omegaconf import OmegaConf

    return bool(config is not None and OmegaConf.select(config, "actor_rollout_ref.rollout.calculate_log_probs"))


def _wrap_v1_compute_metrics(original: Callable) -> Callable:
    @functools.wraps(original)
    def _compute_metrics(self, batch, metrics, *args, **kwargs):
        result = original(self, batch, metrics, *args, **kwargs)
        keys = _sampled_keys(batch)
        rows = fetch_extra_fields(keys, batch.partition_id)
        metrics.update(aggregate_saar_metrics(rows))
        # The agent-loop worker stores the reward's extra info (acc, pred, ...) in each trajectory's extra_fields;
        # a negative sample (save_negative_samples) carries its trajectory's and is not another trajectory.
        trajectories = [row for row in rows if not row.get(NEGATIVE_SAMPLE_KEY)]
        metrics.update(score_acc_metrics([(row.get("reward_extra_info") or {}).get("acc") for row in trajectories]))
        if _rollout_log_probs_on(self.config):
            metrics.update(offpolicy_metrics(_v1_offpolicy_rows(keys, batch.partition_id, rows)))
        if any(ROLLBACK_EVENTS in row for row in rows):  # a cleaner batch
            metrics.update(_gate_metrics(row.get(ROLLBACK_EVENTS) for row in rows))
            metrics.update(_one_trained_row_metric([key.split("_")[0] for key in keys], _v1_trained(keys, batch)))
        return result

    return _mark(_compute_metrics)


def _wrap_v1_validate(original: Callable) -> Callable:
    @functools.wraps(original)
    def _validate(self, *args, **kwargs):
        rows: list[dict[str, Any]] = []
        sample = self.replay_buffer.sample

        # The trainer clears each validation batch from TransferQueue before the next; read it first.
        def sample_and_collect(*sample_args, **sample_kwargs):
            batch, sample_metrics = sample(*sample_args, **sample_kwargs)
            if batch.partition_id == "val":
                rows.extend(_sampled_rows(batch))
            return batch, sample_metrics

        self.replay_buffer.sample = sample_and_collect
        try:
            result = original(self, *args, **kwargs)
        finally:
            del self.replay_buffer.sample  # back to the class's method
        result.update(aggregate_saar_metrics(rows, prefix=VALIDATION_PREFIX))
        return result

    return _mark(_validate)


def _install_v1() -> None:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    if not _is_installed(PPOTrainer._compute_metrics):
        PPOTrainer._compute_metrics = _wrap_v1_compute_metrics(PPOTrainer._compute_metrics)
    if not _is_installed(PPOTrainer._validate):
        PPOTrainer._validate = _wrap_v1_validate(PPOTrainer._validate)


def install() -> None:
    """Wrap both trainers' metric assembly in this process (idempotent); refuse a verl whose hooks changed."""
    require_verl_api()
    _install_legacy()
    _install_v1()
    logger.info("cleaner: rollback/* and tool_calls/* metrics hooked into verl's legacy and v1 trainers")
