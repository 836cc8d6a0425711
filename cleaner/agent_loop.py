"""Retired path. The agent loop is `cleaner.verl.agent_loop.CleanerToolAgentLoop` (registered as
`cleaner_tool_agent`). Importing this module fails naming it."""

raise ImportError(
    "cleaner.agent_loop was removed: the agent loop is cleaner.verl.agent_loop.CleanerToolAgentLoop "
    "(select it with agent_name=cleaner_tool_agent)"
)
