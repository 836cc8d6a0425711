"""Retired path. The manager is `cleaner.verl.agent_loop_manager.CleanerAgentLoopManager`. Importing this module
fails naming it."""

raise ImportError(
    "cleaner.agent_loop_manager was removed: set +actor_rollout_ref.rollout.agent.agent_loop_manager_class="
    "cleaner.verl.agent_loop_manager.CleanerAgentLoopManager"
)
