"""Worker level, v1 trainer (verl's default): the TransferQueue agent-loop worker stores the saar_* stats,
and the cleaner hooks read them back for the step's and the validation's metrics.

The worker is verl's real `AgentLoopWorkerTQ` code (our subclass, without Ray); TransferQueue itself is
replaced by an in-memory store with the same put/get calls and TensorDict formats, because a real one
needs a Ray cluster with several CPUs for its controller and storage actors.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import transfer_queue
from test_worker_saar_metrics import EXPECTED_TRAINING, SCRIPTS, model_dir, trainer_config  # noqa: F401
from transfer_queue.metadata import KVBatchMeta
from verl.utils import tensordict_utils as tu

from cleaner.names import AGENT_NAME
from cleaner.saar.stats import EXTRA_FIELD_KEYS
from cleaner.verl import trainer_metrics
from cleaner.verl.agent_loop_manager import CleanerAgentLoopWorkerTQ
from support.scripted_llm import ScriptedLLMServer
from support.worker import LLMClient

# verl agent-loop workers and the trainer's metric code, seconds per module
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]


class InMemoryTransferQueue:
    """The TransferQueue calls the v1 worker and the hooks make, over a dict: key -> stored fields."""

    def __init__(self):
        self.partitions: dict[str, dict[str, dict[str, Any]]] = {}
        self.tags: dict[str, dict[str, dict]] = {}

    async def async_kv_put(self, key, partition_id, tag=None, **_):
        self.tags.setdefault(partition_id, {})[key] = tag

    async def async_kv_batch_put(self, keys, fields, tags, partition_id):
        columns = {name: fields.get(name) for name in fields.keys()}
        rows = self.partitions.setdefault(partition_id, {})
        for index, key in enumerate(keys):
            rows[key] = {
                name: column.tolist()[index]
                if hasattr(column, "tolist") and not isinstance(column, torch.Tensor)
                else column[index]
                for name, column in columns.items()
            }
            self.tags.setdefault(partition_id, {})[key] = tags[index]

    def kv_batch_get(self, keys, partition_id, select_fields):
        rows = self.partitions[partition_id]
        return tu.list_of_dict_to_tensordict([{name: rows[key][name] for name in select_fields} for key in keys])

    def kv_clear(self, keys, partition_id):
        for key in keys:
            del self.partitions[partition_id][key]

    def batch(self, partition_id: str) -> KVBatchMeta:
        keys = sorted(self.partitions[partition_id])
        return KVBatchMeta(keys=keys, tags=[self.tags[partition_id][key] for key in keys], partition_id=partition_id)


@pytest.fixture(scope="module")
def queue():
    fake = InMemoryTransferQueue()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transfer_queue, "init", lambda *args, **kwargs: None)
        for name in ("async_kv_put", "async_kv_batch_put", "kv_batch_get", "kv_clear"):
            patch.setattr(transfer_queue, name, getattr(fake, name))
        yield fake


@pytest.fixture(scope="module")
def worker(queue, trainer_config, qwen3_tokenizer):  # noqa: F811  (the imported fixture)
    worker = CleanerAgentLoopWorkerTQ(trainer_config, llm_client=None)
    worker.llm_client = LLMClient(ScriptedLLMServer(qwen3_tokenizer, SCRIPTS))
    return worker


def prompt_batch(markers: list[str], *, validate: bool):
    """The TensorDict the v1 trainer hands to `generate_sequences` (from a collated dataset batch)."""
    batch = tu.get_tensordict(
        {
            "raw_prompt": [[{"role": "user", "content": f"{m}: what is 1+...+10? Use Python."}] for m in markers],
            "agent_name": [AGENT_NAME] * len(markers),
            "index": torch.arange(len(markers)),
            "uid": [f"uid{i}" for i in range(len(markers))],
            "data_source": ["unit"] * len(markers),
            "tools_kwargs": [{} for _ in markers],
            "extra_info": [{} for _ in markers],
        }
    )
    tu.assign_non_tensor_data(batch, "global_steps", 1)
    if validate:
        tu.assign_non_tensor_data(batch, "validate", True)
    return batch


async def run_worker(worker, markers, *, validate: bool) -> None:
    await worker.generate_sequences(prompt_batch(markers, validate=validate))
    await asyncio.gather(*list(worker.background_tasks))


async def test_v1_step_metrics_come_from_the_stored_extra_fields(worker, queue, trainer_config):  # noqa: F811
    markers = list(SCRIPTS)
    await run_worker(worker, markers, validate=False)
    batch = queue.batch("train")
    assert batch.keys == [f"uid{i}_0_0" for i in range(len(markers))]
    stored = [queue.partitions["train"][key]["extra_fields"] for key in batch.keys]
    for fields, marker in zip(stored, markers, strict=True):
        assert set(EXTRA_FIELD_KEYS) <= fields.keys()
        assert (fields["saar_tool_calls"], fields["saar_rollbacks_triggered"]) == EXPECTED_TRAINING[marker][:2]

    # The v1 worker stores the reward's extra info with each trajectory (here: no reward ran, so set it), and
    # the trainer adds rewards, old log-probs and advantages before it computes metrics (zeros here), and the
    # version tags.
    for key, acc in zip(batch.keys, [True, False, 0.5, 1.0], strict=True):
        row = queue.partitions["train"][key]
        row["extra_fields"]["reward_extra_info"] = {"acc": acc}
        zeros = torch.zeros(len(row["responses"]), dtype=torch.float32)
        for name in ("values", "advantages", "returns", "rm_scores", "token_level_rewards", "old_log_probs"):
            row[name] = zeros.clone()
        queue.tags["train"][key].update(min_global_steps=1, max_global_steps=1)
    batch = queue.batch("train")

    trainer_metrics.install()  # wraps verl's real PPOTrainer._compute_metrics, which then runs for real
    metrics = compute_metrics(trainer_config, batch)
    assert metrics["training/global_step"] == 1 and "critic/score/mean" in metrics  # verl's own metrics
    assert metrics["response_length/mean"] > 0
    assert (metrics["rollback/triggered"], metrics["rollback/recovered"], metrics["rollback/failed"]) == (3, 2, 1)
    assert metrics["tool_calls/total"] == 8
    assert metrics["tool_calls/total_attempts"] == metrics["tool_calls/first_attempt"]
    assert metrics["critic/score/acc"] == pytest.approx(2 / 4)
    # rollout log-probs are on: the spliced tokens (shallow, deep, the exhausted position's kept attempt) and the
    # control are measured
    offpolicy = {kind: metrics[f"rollback/offpolicy/{kind}/spans"] for kind in ("shallow", "deep", "exhausted")}
    assert offpolicy["shallow"] == offpolicy["deep"] == 1 and offpolicy["exhausted"] >= 1
    # `spliced` is the recovered positions' replacements; the exhausted position's kept attempt stays apart
    assert metrics["rollback/offpolicy/spliced/spans"] == offpolicy["shallow"] + offpolicy["deep"]
    assert metrics["rollback/offpolicy/control/tokens"] > 0

    # padding entries that verl adds to fill a batch are not counted twice
    padded = KVBatchMeta(
        keys=batch.keys, tags=[{**tag, "is_padding": i == 0} for i, tag in enumerate(batch.tags)], partition_id="train"
    )
    metrics = compute_metrics(trainer_config, padded)
    assert metrics["rollback/trajectories"] == len(markers) - 1


def compute_metrics(config, batch: KVBatchMeta) -> dict[str, float]:
    """verl's own `PPOTrainer._compute_metrics` on a trainer holding just the attributes it reads."""
    from verl.trainer.ppo.metric_utils import RolloutMoELoadBalanceMetricsAccumulator
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    # PPOTrainer is abstract in its step callbacks, which _compute_metrics never calls.
    concrete = type("Trainer", (PPOTrainer,), {"on_sample_end": lambda *a: None, "on_step_end": lambda *a: None})
    trainer = object.__new__(concrete)
    trainer.config = config
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = RolloutMoELoadBalanceMetricsAccumulator()
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 1)
    metrics: dict[str, float] = {}
    PPOTrainer._compute_metrics(trainer, batch, metrics, {"step": 1.0}, global_steps=1, epoch=0)
    return metrics


def test_v1_score_acc_counts_trajectories_not_their_negative_samples(queue):
    """With save_negative_samples, a negative inherits its trajectory's reward info; it is not another trajectory:
    one correct and one wrong trajectory plus one negative of the correct one is 1 of 2, not 2 of 3."""
    rows = {
        "r_0_0": {"negative_sample": True, "reward_extra_info": {"acc": 1.0}},  # negative of the correct one
        "r_0_1": {"negative_sample": False, "reward_extra_info": {"acc": 1.0}},
        "w_0_0": {"negative_sample": False, "reward_extra_info": {"acc": 0.0}},
    }
    fields = tu.list_of_dict_to_tensordict([{"extra_fields": row} for row in rows.values()])
    tags = [{} for _ in rows]
    asyncio.run(queue.async_kv_batch_put(keys=list(rows), fields=fields, tags=tags, partition_id="acc"))
    trainer = SimpleNamespace(config=None)
    metrics: dict[str, float] = {}
    verl_compute_metrics = trainer_metrics._wrap_v1_compute_metrics(lambda self, batch, metrics, *a, **k: None)
    verl_compute_metrics(trainer, KVBatchMeta(keys=list(rows), tags=tags, partition_id="acc"), metrics)
    assert metrics["critic/score/acc"] == pytest.approx(1 / 2)


def test_v1_offpolicy_metrics_read_both_log_probs_from_transfer_queue(queue):
    """With rollout log-probs on, the step compares the stored old and rollout log-probs on spliced tokens."""
    from omegaconf import OmegaConf
    from test_offpolicy_metrics import EVENTS, GATE, expected, rows

    stored = {}
    for key, (row, length, events) in zip(["d_0_0", "s_0_0"], zip(rows(), [9, 10], EVENTS, strict=True), strict=True):
        stored[key] = {
            "extra_fields": {"saar_spliced_spans": row.spliced_spans, "saar_rollback_events": events},
            # jagged rows, as TransferQueue holds them (the first response is one token shorter)
            "old_log_probs": row.old_log_probs[:length],
            "rollout_log_probs": row.rollout_log_probs[:length],
            "response_mask": row.response_mask[:length],
        }
    stored["other_0_0"] = {  # a trajectory of another agent loop: no spans, not measured
        "extra_fields": {"saar_spliced_spans": None},
        **{name: torch.zeros(4) for name in ("old_log_probs", "rollout_log_probs", "response_mask")},
    }
    fields = tu.list_of_dict_to_tensordict(list(stored.values()))
    tags = [{} for _ in stored]
    asyncio.run(queue.async_kv_batch_put(keys=list(stored), fields=fields, tags=tags, partition_id="offpolicy"))
    verl_compute_metrics = trainer_metrics._wrap_v1_compute_metrics(lambda self, batch, metrics, *a, **k: None)
    batch = KVBatchMeta(keys=list(stored), tags=tags, partition_id="offpolicy")
    for calculate_log_probs in (True, False):
        trainer = SimpleNamespace(
            config=OmegaConf.create({"actor_rollout_ref": {"rollout": {"calculate_log_probs": calculate_log_probs}}})
        )
        metrics: dict[str, float] = {}
        verl_compute_metrics(trainer, batch, metrics)
        if calculate_log_probs:
            assert {key: metrics[key] for key in expected()} == pytest.approx(expected())
        else:
            compared = [key for key in metrics if key.startswith("rollback/offpolicy/")]
            assert not [key for key in compared if not key.startswith("rollback/offpolicy/scoring_failed")]
        # the gate's own log ratios and its scoring failures come from the events, with or without rollout log-probs
        assert metrics["rollback/offpolicy/scoring_failed"] == 0
        assert {key: metrics[key] for key in GATE} == pytest.approx(GATE)
        assert metrics["rollback/groups_with_one_trained_row"] == 0


async def test_v1_validation_reads_each_batch_before_the_trainer_clears_it(worker, queue):
    await run_worker(worker, list(SCRIPTS), validate=True)

    class ReplayBuffer:
        def sample(self, global_steps, partition_id, batch_size):
            return queue.batch(partition_id), {}

    def verl_validate(self):
        batch, _ = self.replay_buffer.sample(global_steps=1, partition_id="val", batch_size=4)
        transfer_queue.kv_clear(keys=batch.keys, partition_id=batch.partition_id)
        return {"val-core/unit/reward/mean@1": 0.0}

    trainer = type("Trainer", (), {})()
    trainer.replay_buffer = ReplayBuffer()
    metrics = trainer_metrics._wrap_v1_validate(verl_validate)(trainer)

    assert queue.partitions["val"] == {}
    assert metrics["val-core/unit/reward/mean@1"] == 0.0
    assert metrics["val-aux/rollback/trajectories"] == 4
    assert metrics["val-aux/rollback/enabled_fraction"] == 0.0  # SAAR is off in validation by default
    assert metrics["val-aux/tool_calls/failure_reason/exception"] == 2
    assert "sample" not in vars(trainer.replay_buffer)  # the class's method is back


def test_fetch_extra_fields_reads_the_transfer_queue_format(queue):
    rows = [
        {"saar_tool_calls": 2, "saar_rollback_events": [{"mode": "deep"}]},
        {"saar_tool_calls": 0, "saar_rollback_events": []},
    ]
    fields = tu.list_of_dict_to_tensordict([{"extra_fields": row, "prompts": torch.tensor([1, 2])} for row in rows])
    asyncio.run(queue.async_kv_batch_put(keys=["a_0_0", "b_0_0"], fields=fields, tags=[{}, {}], partition_id="unit"))
    assert trainer_metrics.fetch_extra_fields(["a_0_0", "b_0_0"], "unit") == rows
    assert trainer_metrics.fetch_extra_fields([], "unit") == []
    assert np.array_equal(queue.partitions["unit"]["a_0_0"]["prompts"], [1, 2])
