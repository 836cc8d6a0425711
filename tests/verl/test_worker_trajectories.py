"""The cleaner agent-loop worker (legacy trainer) on real verl classes: batches that mix agent loops, a trajectory
that raises, and infra-marked trajectories masked out of the loss.

No Ray: `CleanerAgentLoopWorker` is built in-process from verl's composed `ppo_trainer` config (our agent-loop
yaml, a scripted tool), its LLM client is the scripted server, and verl's `AgentLoopManager.generate_sequences`
concatenates the chunks of two worker handles.
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
from cleaner.verl.agent_loop_manager import CleanerAgentLoopWorker, _LegacyManager
from cleaner.verl.multi_turn_config import MULTI_TURN_TARGET
from cleaner.verl.trainer_config import compose_trainer_config
from support.saar_script import turn
from support.scripted_llm import ScriptedLLMServer, ScriptedPythonTool
from support.worker import LLMClient, write_model_dir

pytestmark = pytest.mark.slow  # builds verl's agent-loop workers: seconds per test

ANSWER = "<think>\nDone.\n</think>\n\nThe answer is \\boxed{55}."
# What verl's workers put in sampling params (plus the tool parser's stop ids): anything else is an unknown key
# that SGLang's and vLLM's SamplingParams(**params) reject.
SAMPLING_KEYS = {"temperature", "top_p", "top_k", "repetition_penalty", "logprobs", "stop_token_ids"}


SCRIPTS = {
    "P-CLEANER": [turn("Sum.", "print(totl)\n# outcome: exception NameError"), turn("Fix.", "print(55)"), ANSWER],
    "P-TOOL-AGENT": [turn("Sum.", "print(55)"), ANSWER],
    "P-SINGLE": [ANSWER],
    "P-VAL": [ANSWER],
    "P-INFRA": [turn("Sum.", "print(55)\n# outcome: infra queue_timeout"), ANSWER],
    "P-CRASH": [turn("Sum.", "print(55)")],  # the script runs out: the server raises on the second turn
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, qwen3_tokenizer) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("qwen3-tiny"), qwen3_tokenizer)


@pytest.fixture(scope="module")
def tool_config(tmp_path_factory) -> Path:
    from omegaconf import OmegaConf

    path = tmp_path_factory.mktemp("tools") / "tools.yaml"
    tool = {"class_name": f"{ScriptedPythonTool.__module__}.ScriptedPythonTool", "config": {"type": "native"}}
    OmegaConf.save(OmegaConf.create({"tools": [tool]}), path)
    return path


def worker_config(model_dir: Path, tool_config: Path, *multi_turn: str):
    return compose_trainer_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "data.max_prompt_length=1024",
            "data.max_response_length=1024",
            "actor_rollout_ref.rollout.name=sglang",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.format=hermes",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={resource_path(AGENT_LOOP_CONFIG)}",
            f"actor_rollout_ref.rollout.multi_turn._target_={MULTI_TURN_TARGET}",
            "+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=true",
            *multi_turn,
            "trainer.use_v1=false",
        ],
    )


def make_worker(config, tokenizer) -> tuple[CleanerAgentLoopWorker, ScriptedLLMServer]:
    worker = CleanerAgentLoopWorker(config, llm_client=None)
    server = ScriptedLLMServer(tokenizer, SCRIPTS)
    worker.llm_client = LLMClient(server)
    return worker, server


def batch(markers: list[str], *, agent_names: list[str] | None, validate: bool):
    from verl import DataProto

    def column(values):
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array

    non_tensors = {
        "raw_prompt": column([[{"role": "user", "content": f"{m}: what is 1+...+10?"}] for m in markers]),
        "index": np.arange(len(markers)),
        "tools_kwargs": column([{} for _ in markers]),
        "extra_info": column([{} for _ in markers]),
    }
    if agent_names is not None:
        non_tensors["agent_name"] = column(agent_names)
    return DataProto.from_dict(non_tensors=non_tensors, meta_info={"global_steps": 1, "validate": validate})


def test_mixed_agent_loops_and_validation_without_agent_name_send_only_sampling_keys(
    model_dir, tool_config, qwen3_tokenizer
):
    """The validate flag reaches the cleaner loop out of band; other loops forward their params untouched."""
    config = worker_config(model_dir, tool_config)
    # identical train/val sampling: only the worker's flag can tell the loop it is validating
    for name in ("temperature", "top_p", "top_k"):
        config.actor_rollout_ref.rollout.val_kwargs[name] = config.actor_rollout_ref.rollout[name]
    worker, server = make_worker(config, qwen3_tokenizer)
    markers = ["P-CLEANER", "P-TOOL-AGENT", "P-SINGLE"]
    training = asyncio.run(
        worker.generate_sequences(
            batch(markers, agent_names=[AGENT_NAME, "tool_agent", "single_turn_agent"], validate=False)
        )
    )
    validation = asyncio.run(worker.generate_sequences(batch(["P-VAL"], agent_names=None, validate=True)))
    assert len(training) == 3 and len(validation) == 1
    for request in server.requests:
        assert set(request.sampling_params) <= SAMPLING_KEYS, request.marker
    assert [row for row in training.non_tensor_batch["saar_rollback_enabled"]] == [1, None, None]
    assert training.non_tensor_batch["saar_rollbacks_recovered"][0] == 1
    assert validation.non_tensor_batch["saar_rollback_enabled"][0] is None  # single_turn_agent: no SAAR stats


def test_chunks_without_a_cleaner_trajectory_still_concatenate(model_dir, tool_config, qwen3_tokenizer):
    """verl's DataProto.concat needs the same columns in every worker's chunk."""
    worker, _ = make_worker(worker_config(model_dir, tool_config), qwen3_tokenizer)

    async def generate(chunk):
        output = await worker.generate_sequences(chunk)
        output.batch["rm_scores"] = torch.zeros_like(output.batch["response_mask"], dtype=torch.float32)
        output.meta_info["reward_extra_keys"] = []
        return output

    manager = _LegacyManager(config=worker.config, llm_client=None)
    handle = SimpleNamespace(generate_sequences=SimpleNamespace(remote=generate))
    manager.agent_loop_workers = [handle, handle]
    markers = ["P-TOOL-AGENT", "P-SINGLE", "P-CLEANER", "P-CLEANER"]  # the first chunk has no cleaner row
    names = ["tool_agent", "single_turn_agent", AGENT_NAME, AGENT_NAME]
    out = manager.generate_sequences(batch(markers, agent_names=names, validate=False))
    assert len(out) == 4
    for key in EXTRA_FIELD_KEYS:
        assert key in out.non_tensor_batch, key
    assert list(out.non_tensor_batch["saar_rollbacks_recovered"]) == [None, None, 1, 1]


def test_a_trajectory_that_raises_becomes_an_infra_error_not_a_failed_batch(model_dir, tool_config, qwen3_tokenizer):
    worker, _ = make_worker(worker_config(model_dir, tool_config), qwen3_tokenizer)
    out = asyncio.run(
        worker.generate_sequences(batch(["P-CRASH", "P-CLEANER"], agent_names=[AGENT_NAME] * 2, validate=False))
    )
    columns = out.non_tensor_batch
    assert list(columns["saar_infra_error"]) == [True, False]
    assert list(columns["saar_fail_agent_loop_error"]) == [1, 0]
    # the failed trajectory is its prompt plus one end-of-turn token that is not trained on
    response_tokens = out.batch["attention_mask"][:, out.batch["prompts"].shape[1] :].sum(dim=1)
    assert response_tokens.tolist()[0] == 1 and out.batch["response_mask"][0].sum() == 0
    assert columns["saar_rollbacks_recovered"][1] == 1 and out.batch["response_mask"][1].sum() > 0


def test_drop_infra_error_trajectories_masks_them_out_of_the_loss(model_dir, tool_config, qwen3_tokenizer):
    from verl.trainer.ppo.core_algos import agg_loss

    config = worker_config(
        model_dir, tool_config, "+actor_rollout_ref.rollout.multi_turn.drop_infra_error_trajectories=true"
    )
    worker, _ = make_worker(config, qwen3_tokenizer)
    out = asyncio.run(
        worker.generate_sequences(batch(["P-INFRA", "P-CLEANER"], agent_names=[AGENT_NAME] * 2, validate=False))
    )
    assert list(out.non_tensor_batch["saar_infra_dropped"]) == [1, 0]
    assert list(out.non_tensor_batch["saar_infra_error"]) == [True, False]
    mask = out.batch["response_mask"]
    assert mask[0].sum() == 0 and mask[1].sum() > 0
    # verl's own loss aggregation over this mask: the dropped trajectory gets no gradient
    log_prob = torch.zeros(mask.shape, requires_grad=True)
    loss = agg_loss(loss_mat=-log_prob * torch.ones(mask.shape), loss_mask=mask.float(), loss_agg_mode="token-mean")
    loss.backward()
    assert log_prob.grad[0].abs().sum() == 0 and log_prob.grad[1].abs().sum() > 0

    kept = worker_config(model_dir, tool_config)  # default off: the trajectory is only marked
    worker, _ = make_worker(kept, qwen3_tokenizer)
    out = asyncio.run(worker.generate_sequences(batch(["P-INFRA"], agent_names=[AGENT_NAME], validate=False)))
    assert out.non_tensor_batch["saar_infra_dropped"][0] == 0 and out.batch["response_mask"][0].sum() > 0
