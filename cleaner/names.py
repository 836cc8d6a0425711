"""Names that several floors must spell identically, written once."""

# The agent loop's name in verl's registry and in the `agent_name` column data preparation writes.
AGENT_NAME = "cleaner_tool_agent"
