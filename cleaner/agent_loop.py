"""The public path `cleaner.agent_loop.CleanerToolAgentLoop`: the agent loop lives in `cleaner.verl.agent_loop`."""

from cleaner.verl.agent_loop import CleanerToolAgentLoop

__all__ = ["CleanerToolAgentLoop"]
