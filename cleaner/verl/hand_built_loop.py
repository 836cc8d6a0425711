"""An agent loop built by hand, outside verl's worker: the trainer config it reads and the constructor call.

The tests' scripted servers and the overhead benchmark run verl's agent-loop machinery on CPU without a trainer;
both build the loop here, so they build the same one verl's `AgentLoopWorker` would.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf


def agent_loop_config(
    *, response_length: int = 4096, prompt_length: int = 2048, engine: str = "vllm", **multi_turn: Any
) -> DictConfig:
    """The part of verl's trainer config an agent loop reads: training sampling at temperature 1 (validation at
    top_p 0.6), rollout log-probs on, `engine` as `actor_rollout_ref.rollout.name`, and `multi_turn` keys."""
    turns = {
        "enable": True,
        "max_assistant_turns": None,
        "max_user_turns": None,
        "max_parallel_calls": 1,
        "max_tool_response_length": 256,
        "tool_response_truncate_side": "middle",
        "format": "hermes",
        **multi_turn,
    }
    rollout = {
        "name": engine,
        "prompt_length": prompt_length,
        "response_length": response_length,
        "full_determinism": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "calculate_log_probs": True,
        "logprobs_mode": "processed_logprobs",  # verl's default
        "val_kwargs": {"temperature": 1.0, "top_p": 0.6, "top_k": -1, "n": 1, "do_sample": True},
        "multi_turn": turns,
    }
    return OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}, "data": {"apply_chat_template_kwargs": {}}})


def build_agent_loop(
    loop_cls: type, config: DictConfig, server: Any, tokenizer: Any, tools: list, hf_model_type: str = "qwen3"
):
    """Instantiate an agent loop the way verl's worker does (keyword arguments, wrapped config and tools)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return loop_cls(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type=hf_model_type,
        tools=ToolListWrap(tools),
    )
