"""cleaner.verl.purification in the v1 trainer: the mode rewrites `response_mask` and `loss_mask` in TransferQueue
before verl's `_compute_advantage` reads them (void rows after it), RoC takes its cut rollouts out of the batch
and of TransferQueue before verl balances and pads it, and the audit reads the advantages written back.

TransferQueue is an in-memory store with the same get/put calls and TensorDict formats (a real one needs a Ray
cluster for its controller and storage actors)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transfer_queue
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue.metadata import KVBatchMeta
from verl.utils import tensordict_utils as tu

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.roc import RocCounts
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY, Turn
from cleaner.verl import purification

FAILED = Turn(0, 2, 1, 2, call=True, answer=False, failed=True)
CALL = Turn(0, 2, 1, 2, call=True, answer=False, failed=False)
ANSWER = Turn(3, 5, None, None, call=False, answer=True, failed=False)
VOID = Turn(3, 5, None, None, call=False, answer=False, failed=False, void=True)
KEYS = ["u_0_0", "u_1_0", "v_0_0"]
COUNTS = RocCounts(tool_responses=1, error_responses=0, answer_opens=1, answers=1, assistant_turns=1)


class InMemoryTransferQueue:
    def __init__(self):
        self.rows: dict[str, dict[str, Any]] = {}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return tu.list_of_dict_to_tensordict([{name: self.rows[key][name] for name in select_fields} for key in keys])

    def kv_clear(self, keys, partition_id):
        for key in keys:
            del self.rows[key]

    def kv_batch_put(self, keys, partition_id, fields):
        for name in fields.keys():
            for key, value in zip(keys, fields[name].unbind(0), strict=True):
                self.rows[key][name] = value
        return KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id=partition_id)


@pytest.fixture
def queue(monkeypatch):
    monkeypatch.setattr(purification, "_removed", [])
    fake = InMemoryTransferQueue()
    for name in ("kv_batch_get", "kv_batch_put", "kv_clear"):
        monkeypatch.setattr(transfer_queue, name, getattr(fake, name))
    rows = [("u", 1.0, [FAILED, ANSWER], 6), ("u", 0.0, [CALL, VOID], 6), ("v", 1.0, [CALL, ANSWER], 5)]
    for key, (uid, score, turns, length) in zip(KEYS, rows, strict=True):
        mask = torch.tensor([1, 1, 0, 1, 1, 0][:length])
        scores = torch.zeros(length)
        scores[4] = score
        fake.rows[key] = {
            "uid": uid,
            "rm_scores": scores,
            "response_mask": mask,
            "loss_mask": mask.clone(),
            "extra_fields": {
                TURNS_KEY: [turn.to_dict() for turn in turns],
                GENERATED_TOKENS_KEY: 8,
                ROC_COUNTS_KEY: COUNTS.to_dict(),
            },
        }
    return fake


def batch() -> KVBatchMeta:
    return KVBatchMeta(keys=list(KEYS), tags=[{} for _ in KEYS], partition_id="train")


def test_the_mode_rewrites_both_masks_in_transfer_queue(queue):
    purification.apply_v1(PurificationConfig(purification=Purification.ERROR_TURN_MASK), batch())
    assert queue.rows["u_0_0"]["response_mask"].tolist() == [0, 0, 0, 1, 1, 0]
    assert queue.rows["u_0_0"]["loss_mask"].tolist() == [0, 0, 0, 1, 1, 0]
    assert queue.rows["u_1_0"]["response_mask"].tolist() == [1, 1, 0, 1, 1, 0]
    assert queue.rows["v_0_0"]["response_mask"].tolist() == [1, 1, 0, 1, 1]


def test_the_hook_applies_the_mode_before_verl_and_audits_after(queue, monkeypatch):
    monkeypatch.setattr(purification, "_config", PurificationConfig(purification=Purification.ERROR_TRAJECTORY_FILTER))
    seen = {}

    def verl_compute_advantage(self, batch, metrics):
        """Stands in for verl's: reads the masks, writes +1 / -1 per trained token by score."""
        data = transfer_queue.kv_batch_get(batch.keys, batch.partition_id, ["response_mask", "rm_scores"])
        masks, scores = data["response_mask"].unbind(0), data["rm_scores"].unbind(0)
        seen["masks"] = [mask.tolist() for mask in masks]
        advantages = [mask.float() * (1.0 if score.sum() > 0 else -1.0) for mask, score in zip(masks, scores)]
        fields = TensorDict({"advantages": torch.nested.as_nested_tensor(advantages, layout=torch.jagged)}, [3])
        return transfer_queue.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)

    hook = purification._wrap_v1_compute_advantage(verl_compute_advantage)
    metrics: dict[str, float] = {}
    hook(OmegaConf.create({}), batch(), metrics)
    assert seen["masks"][0] == [0] * 6  # verl saw the dropped row already dropped
    assert metrics["purify/dropped_trajectory_share"] == pytest.approx(1 / 3)
    assert metrics["purify/reinforced_error_token_share"] == 0.0
    assert metrics["purify/generated_tokens"] == 24.0


def verl_compute_advantage(self, batch, metrics):
    """Stands in for verl's: writes +1 / -1 per masked-in token by score (the baseline is not modelled)."""
    data = transfer_queue.kv_batch_get(batch.keys, batch.partition_id, ["response_mask", "rm_scores"])
    masks, scores = data["response_mask"].unbind(0), data["rm_scores"].unbind(0)
    advantages = [mask.float() * (1.0 if score.sum() > 0 else -1.0) for mask, score in zip(masks, scores)]
    fields = TensorDict({"advantages": torch.nested.as_nested_tensor(advantages, layout=torch.jagged)}, [len(masks)])
    return transfer_queue.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)


def test_void_rows_are_loss_masked_after_verl_computed_the_advantages(queue, monkeypatch):
    monkeypatch.setattr(purification, "_config", PurificationConfig(purification=Purification.VOID_TURN_FILTER))
    seen = {}

    def compute_advantage(self, batch, metrics):
        seen["mask"] = transfer_queue.kv_batch_get(["u_1_0"], "train", ["response_mask"])["response_mask"][0].tolist()
        return verl_compute_advantage(self, batch, metrics)

    purification._wrap_v1_compute_advantage(compute_advantage)(OmegaConf.create({}), batch(), {})
    assert seen["mask"] == [1, 1, 0, 1, 1, 0]  # verl saw the void row: its reward is in the baseline
    for name in ("response_mask", "loss_mask", "advantages"):
        assert queue.rows["u_1_0"][name].abs().sum() == 0
    assert queue.rows["u_0_0"]["loss_mask"].tolist() == [1, 1, 0, 1, 1, 0]


def test_roc_takes_the_cut_rollouts_out_of_the_batch_and_transfer_queue(queue, monkeypatch):
    monkeypatch.setattr(purification, "_config", PurificationConfig(purification=Purification.ROC))
    monkeypatch.setattr(purification, "_rollout_n", 2)  # groups of 2 cut to 1
    seen = {}

    def verl_balance_batch(self, batch, metrics):
        seen["keys"] = list(batch.keys)
        return batch

    metrics: dict[str, float] = {}
    padded = KVBatchMeta(
        keys=[*KEYS, "pad_0_0"], tags=[{}, {}, {}, {"is_padding": True}], partition_id="train", extra_info={"t": 1}
    )
    queue.rows["pad_0_0"] = {}
    result = purification._wrap_v1_balance_batch(verl_balance_batch)(None, padded, metrics)
    # group u (rewards 1, 0) cut to 1: round(0.5) = 0 failures, so the correct row; group v (one reward: all
    # equal) is rejected. verl's padding entry stays for verl to handle.
    assert seen["keys"] == result.keys == ["u_0_0", "pad_0_0"]
    assert result.extra_info == {"t": 1}
    assert not {"u_1_0", "v_0_0"} & queue.rows.keys()
    assert metrics["purify/roc_removed_rows"] == 2 and metrics["purify/roc_rejected_equal_reward_groups"] == 1
