"""Worker level: a real verl AgentLoopWorker runs `cleaner_tool_agent` with SAAR on, and the trainer logs it.

No Ray: the worker is built in-process from verl's own composed `ppo_trainer` config (our agent-loop yaml,
a tool config), its LLM client is the scripted server, and verl's real `AgentLoopManager.generate_sequences`
splits the batch over two worker handles and concatenates the chunks. The metrics are then taken from
the legacy trainer's own functions (`compute_data_metrics`, `RayPPOTrainer._validate`) with the cleaner
hooks installed, i.e. the dict the trainer hands to its tracker (console, wandb).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cleaner.names import AGENT_NAME
from cleaner.resources import AGENT_LOOP_CONFIG, resource_path
from cleaner.saar.stats import EXTRA_FIELD_KEYS
from cleaner.verl import trainer_metrics
from cleaner.verl.agent_loop_manager import CleanerAgentLoopWorker, _LegacyManager
from cleaner.verl.multi_turn_config import MULTI_TURN_TARGET
from cleaner.verl.saar_metrics import aggregate_saar_metrics, rows_from_columns
from cleaner.verl.trainer_config import compose_trainer_config
from support.saar_script import turn
from support.scripted_llm import ScriptedLLMServer, ScriptedPythonTool
from support.worker import LLMClient, write_model_dir

pytestmark = pytest.mark.slow  # builds verl's agent-loop workers and trainer config: seconds per module

MAX_TOOL_RETRIES = 2

ANSWER = "<think>\nDone.\n</think>\n\nThe answer is \\boxed{55}."


FAILED = "total = sum(range(1, 11))\nprint(totl)\n# outcome: exception NameError"
# One script per sample, keyed by a marker in its prompt, with the stats SAAR must report for it.
SCRIPTS: dict[str, list[str]] = {
    "P-CLEAN": [turn("Sum it.", "print(sum(range(11)))"), ANSWER],
    "P-SHALLOW": [turn("Sum it.", FAILED), turn("Typo.", "total = sum(range(1, 11))\nprint(total)"), ANSWER],
    "P-DEEP": [
        turn("Sum it.", FAILED),
        turn("Loop instead.", "acc = 0\nfor k in range(11):\n    acc += k\nacc"),
        ANSWER,
    ],
    "P-EXHAUSTED": [
        turn("Sum it.", "while True: pass\n# outcome: timeout"),
        turn("Again.", "while 1: pass\n# outcome: timeout"),
        turn("Once more.", "import time; time.sleep(99)\n# outcome: timeout"),
        turn("No tools then.", None) + "The answer is \\boxed{55}.",
    ],
}
EXPECTED_TRAINING = {  # marker -> (tool_calls, triggered, recovered, failed, shallow, deep, retries)
    "P-CLEAN": (1, 0, 0, 0, 0, 0, 0),
    "P-SHALLOW": (2, 1, 1, 0, 1, 0, 1),
    "P-DEEP": (2, 1, 1, 0, 0, 1, 1),
    "P-EXHAUSTED": (3, 1, 0, 1, 0, 0, 2),
}
COUNTERS = (
    "tool_calls",
    "rollbacks_triggered",
    "rollbacks_recovered",
    "rollbacks_failed",
    "rollbacks_shallow",
    "rollbacks_deep",
    "retries_used",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, qwen3_tokenizer) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("qwen3-tiny"), qwen3_tokenizer)


@pytest.fixture(scope="module")
def trainer_config(model_dir, tmp_path_factory):
    from omegaconf import OmegaConf

    tool_config = tmp_path_factory.mktemp("tools") / "tools.yaml"
    tool_schema = {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run Python code.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
    tool = {
        "class_name": f"{ScriptedPythonTool.__module__}.ScriptedPythonTool",
        "config": {"type": "native"},
        "tool_schema": tool_schema,
    }
    OmegaConf.save(OmegaConf.create({"tools": [tool]}), tool_config)
    return compose_trainer_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "data.max_prompt_length=1024",
            "data.max_response_length=2048",
            "actor_rollout_ref.rollout.name=sglang",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={resource_path(AGENT_LOOP_CONFIG)}",
            "actor_rollout_ref.rollout.agent.num_workers=2",
            # the reference recipes' overrides (not in verl's schema, hence the + and our schema)
            f"actor_rollout_ref.rollout.multi_turn._target_={MULTI_TURN_TARGET}",
            "+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=true",
            f"+actor_rollout_ref.rollout.multi_turn.max_tool_retries={MAX_TOOL_RETRIES}",
            "+actor_rollout_ref.rollout.multi_turn.rollback_probability=1.0",
            "trainer.use_v1=false",
        ],
    )


class WorkerHandle:
    """Stands in for the Ray actor handle: `handle.generate_sequences.remote(chunk)` awaits the real worker.

    It also plays verl's reward loop, which would attach `rm_scores` (one score at the last response token).
    """

    def __init__(self, worker: CleanerAgentLoopWorker):
        self.generate_sequences = SimpleNamespace(remote=self._generate)
        self.worker = worker

    async def _generate(self, chunk):
        output = await self.worker.generate_sequences(chunk)
        output.batch["rm_scores"] = torch.zeros_like(output.batch["response_mask"], dtype=torch.float32)
        output.meta_info["reward_extra_keys"] = []
        return output


@pytest.fixture(scope="module")
def manager(trainer_config, qwen3_tokenizer):
    trainer_metrics.install()
    worker = CleanerAgentLoopWorker(trainer_config, llm_client=None)
    worker.llm_client = LLMClient(ScriptedLLMServer(qwen3_tokenizer, SCRIPTS))
    manager = _LegacyManager(config=trainer_config, llm_client=None)
    manager.agent_loop_workers = [WorkerHandle(worker), WorkerHandle(worker)]  # two chunks, concatenated by verl
    return manager


def prompts(markers: list[str], *, validate: bool):
    from verl import DataProto

    def column(values):
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array

    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": column(
                [[{"role": "user", "content": f"{m}: what is 1+...+10? Use Python."}] for m in markers]
            ),
            "agent_name": column([AGENT_NAME] * len(markers)),
            "index": np.arange(len(markers)),
            "uid": column([f"uid-{m}" for m in markers]),
            "data_source": column(["unit"] * len(markers)),
            "tools_kwargs": column([{} for _ in markers]),
            "extra_info": column([{} for _ in markers]),
        },
        meta_info={"global_steps": 1, "validate": validate},
    )


def with_training_tensors(batch):
    """The tensors the trainer adds (rewards, advantages) before it computes its data metrics."""
    zeros = torch.zeros_like(batch.batch["response_mask"], dtype=torch.float32)
    for key in ("token_level_scores", "token_level_rewards", "advantages", "returns"):
        batch.batch[key] = zeros.clone()
    return batch


def test_training_batch_carries_every_saar_column_and_the_logged_metrics(manager):
    from verl.trainer.ppo import ray_trainer

    markers = list(SCRIPTS)
    batch = manager.generate_sequences(prompts(markers, validate=False))

    assert len(batch) == len(markers)
    for key in EXTRA_FIELD_KEYS:
        assert key in batch.non_tensor_batch, key
        assert all(value is not None for value in batch.non_tensor_batch[key]), key
    for row, marker in enumerate(markers):
        got = tuple(int(batch.non_tensor_batch[f"saar_{name}"][row]) for name in COUNTERS)
        assert got == EXPECTED_TRAINING[marker], marker
        assert batch.non_tensor_batch["saar_rollback_enabled"][row] == 1

    # what RayPPOTrainer.fit() passes to its logger: compute_data_metrics(batch) is hooked. By then verl's
    # extract_reward has put the reward's extra info in the batch: an `acc` column (partial credit is not correct).
    batch.non_tensor_batch["acc"] = np.array([1.0, 0.5, 0.0, True], dtype=object)
    metrics = ray_trainer.compute_data_metrics(batch=with_training_tensors(batch), use_critic=False)
    assert metrics["critic/score/acc"] == pytest.approx(2 / 4)
    assert "critic/score/mean" in metrics  # verl's own metrics are still there
    assert metrics["rollback/triggered"] == 3
    assert metrics["rollback/recovered"] == 2
    assert metrics["rollback/failed"] == 1
    assert metrics["rollback/recovery_rate"] == pytest.approx(2 / 3)
    assert (metrics["rollback/shallow"], metrics["rollback/deep"]) == (1, 1)
    # the reference's names, same counts
    assert (metrics["rollback/rollback_tool_call_only_count"], metrics["rollback/rollback_full_turn_count"]) == (1, 1)
    assert metrics["tool_calls/total_attempts"] == metrics["tool_calls/first_attempt"] == 4
    assert metrics["tool_calls/success_rate"] == metrics["tool_calls/first_attempt_success_rate"]
    assert metrics["rollback/retries"] == 4
    assert metrics["tool_calls/total"] == 8
    assert metrics["tool_calls/first_attempt_success_rate"] == pytest.approx(1 / 4)
    assert metrics["tool_calls/failure_reason/timeout"] == 3
    assert metrics["tool_calls/failure_reason/exception"] == 2
    resampled = sum(int(v) for v in batch.non_tensor_batch["saar_resampled_tokens"])
    assert metrics["rollback/resampled_tokens"] == resampled > 0
    spliced = sum(int(v) for v in batch.non_tensor_batch["saar_spliced_tokens"])
    response = sum(int(v) for v in batch.non_tensor_batch["saar_response_tokens"])
    assert metrics["rollback/spliced_token_fraction"] == pytest.approx(spliced / response)
    # saar_response_tokens counts exactly the real (unpadded) response tokens of each row
    assert response == int(batch.batch["attention_mask"][:, batch.batch["prompts"].shape[1] :].sum())


def test_chunks_with_and_without_rollbacks_concatenate(manager):
    """verl's DataProto.concat needs identical keys in every chunk: a rollback-free chunk must still have them."""
    batch = manager.generate_sequences(prompts(["P-CLEAN", "P-CLEAN", "P-SHALLOW", "P-DEEP"], validate=False))
    assert len(batch) == 4
    assert [len(events) for events in batch.non_tensor_batch["saar_rollback_events"]] == [0, 0, 1, 1]
    assert aggregate_saar_metrics(rows_from_columns(batch.non_tensor_batch))["rollback/recovered"] == 2


def test_validation_metrics_through_the_legacy_trainers_validate(manager, trainer_config, qwen3_tokenizer):
    """RayPPOTrainer._validate runs for real over a one-batch val loader; SAAR is off in validation by default."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    markers = ["P-CLEAN", "P-SHALLOW", "P-DEEP", "P-EXHAUSTED"]
    val_batch = prompts(markers, validate=True)
    trainer = object.__new__(RayPPOTrainer)  # only the attributes _validate reads
    trainer.config = trainer_config
    trainer.tokenizer = qwen3_tokenizer
    trainer.async_rollout_manager = manager
    trainer.use_rm = False
    trainer.global_steps = 3
    # a collated RLHFDataset batch: the non-tensor columns plus its per-row dummy tensor
    trainer.val_dataloader = [
        {**val_batch.non_tensor_batch, "dummy_tensor": torch.zeros(len(markers), 1, dtype=torch.uint8)}
    ]

    metrics = trainer._validate()

    assert "val-core/unit/reward/mean@1" in metrics  # verl's own validation metrics
    assert metrics["val-aux/rollback/trajectories"] == 4
    assert metrics["val-aux/rollback/enabled_fraction"] == 0.0
    assert metrics["val-aux/rollback/triggered"] == 0
    # without rollback every failed call stays in the trajectory and the model continues from it
    assert metrics["val-aux/tool_calls/failure_reason/exception"] == 2
    assert metrics["val-aux/tool_calls/failure_reason/timeout"] == 3
    assert not any(key.startswith(("rollback/", "tool_calls/")) for key in metrics)


def test_manager_class_dispatches_on_the_trainer_and_installs_the_hooks(monkeypatch, trainer_config):
    from omegaconf import OmegaConf

    from cleaner.verl import agent_loop_manager

    created = []
    for cls in (agent_loop_manager._LegacyManager, agent_loop_manager._TransferQueueManager):
        monkeypatch.setattr(cls, "create", classmethod(lambda c, *a, **k: created.append(c) or c))
    for use_v1 in (False, True):
        config = OmegaConf.merge(trainer_config, {"trainer": {"use_v1": use_v1}})
        agent_loop_manager.CleanerAgentLoopManager.create(config=config, llm_client=None)
    assert created == [agent_loop_manager._LegacyManager, agent_loop_manager._TransferQueueManager]
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    for hooked in (
        ray_trainer.compute_data_metrics,
        ray_trainer.RayPPOTrainer._validate,
        PPOTrainer._compute_metrics,
        PPOTrainer._validate,
    ):
        assert trainer_metrics._is_installed(hooked)


def test_worker_refuses_to_start_when_the_agent_loop_is_not_registered(monkeypatch, trainer_config):
    from cleaner.verl import plugin
    from cleaner.verl.plugin import PluginError

    monkeypatch.setattr(plugin, "AGENT_LOOP_TARGET", "cleaner.agent_loop.SomethingElse")
    with pytest.raises(PluginError, match="expected 'cleaner.agent_loop.SomethingElse'"):
        CleanerAgentLoopWorker(trainer_config, llm_client=None)


def test_worker_hands_the_validate_flag_to_the_loop_even_when_sampling_matches(trainer_config, qwen3_tokenizer):
    """With identical train/val sampling the loop cannot infer validation; the cleaner worker tells it exactly."""
    config = trainer_config.copy()
    rollout = config.actor_rollout_ref.rollout
    for name in ("temperature", "top_p", "top_k"):
        rollout.val_kwargs[name] = rollout[name]
    worker = CleanerAgentLoopWorker(config, llm_client=None)
    server = ScriptedLLMServer(qwen3_tokenizer, SCRIPTS)
    worker.llm_client = LLMClient(server)

    async def enabled(validate: bool) -> list[int]:
        output = await worker.generate_sequences(prompts(["P-SHALLOW"], validate=validate))
        return [int(v) for v in output.non_tensor_batch["saar_rollback_enabled"]]

    assert asyncio.run(enabled(validate=False)) == [1]
    assert asyncio.run(enabled(validate=True)) == [0]
    assert all("__cleaner_validate__" not in request.sampling_params for request in server.requests)
