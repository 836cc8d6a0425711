"""The public path `cleaner.agent_loop_manager.CleanerAgentLoopManager` (`cleaner.verl.agent_loop_manager`)."""

from cleaner.verl.agent_loop_manager import CleanerAgentLoopManager

__all__ = ["CleanerAgentLoopManager"]
