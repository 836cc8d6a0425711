"""Run the registered agent loop outside verl's worker: what `cleaner rollout` needs from verl.

Each trajectory instantiates the registry entry exactly as verl's `AgentLoopWorker` does
(`hydra.utils.instantiate` with the composed trainer config, the tools and the tool parser); its
`server_manager` is an HTTP client (`cleaner.rollout.clients`) behind `TokenOutputServer`.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from verl.workers.rollout.replica import TokenOutput

logger = logging.getLogger(__name__)


class TokenOutputServer:
    """verl's `server_manager.generate()` over a client whose answers have `TokenOutput`'s fields."""

    def __init__(self, client: Any):
        self._client = client

    async def generate(self, request_id: str, **kwargs: Any) -> TokenOutput:
        output = await self._client.generate(request_id, **kwargs)
        return TokenOutput(
            token_ids=output.token_ids,
            log_probs=output.log_probs,
            stop_reason=output.stop_reason,
            extra_fields=output.extra_fields,
        )


def register_agent_loops(agent_loop_config_path: Path) -> dict[str, Any]:
    """Load the agent-loop yaml into verl's registry, as `AgentLoopWorker.__init__` does."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    for entry in OmegaConf.load(agent_loop_config_path):
        _agent_loop_registry[entry.name] = entry
    return _agent_loop_registry


def load_tools(tool_config_path: Path) -> list:
    """The tools of a verl tool yaml, instantiated."""
    from verl.tools.tool_registry import load_all_tools

    # verl's BaseTool.__init__ print()s each schema; keep it out of the caller's output.
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        tools = load_all_tools(tool_config_path=str(tool_config_path), function_tool_path=None)
    logger.debug("tools loaded: %s", printed.getvalue())
    return tools


class AgentLoopFactory:
    """Builds agent loops from verl's registry as its worker does: one per trajectory."""

    def __init__(self, registry: dict[str, Any], config: DictConfig, tokenizer, hf_model_type: str, tools: list):
        self.registry = registry
        self.config = config
        self.tokenizer = tokenizer
        self.hf_model_type = hf_model_type
        self.tools = tools

    def new_loop(self, client: Any, agent_name: str):
        """An agent loop named `agent_name` whose generations come from `client`."""
        import hydra.utils
        from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
        from verl.utils.dataset.rl_dataset import RLHFDataset

        return hydra.utils.instantiate(
            self.registry[agent_name],
            trainer_config=DictConfigWrap(config=self.config),
            server_manager=TokenOutputServer(client),
            tokenizer=self.tokenizer,
            processor=None,
            hf_model_type=self.hf_model_type,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(self.config.data),
            tools=ToolListWrap(self.tools),
        )
