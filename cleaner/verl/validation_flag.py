"""verl's per-trajectory validate flag, handed from the cleaner agent-loop workers to the agent loop out of band.

verl passes agent loops no validate flag. The cleaner workers (`cleaner.verl.agent_loop_manager`) set this context
variable around each trajectory; asyncio runs every trajectory in its own task with its own copy of the context, so
concurrent trajectories never see each other's value. Nothing is added to the sampling params, which every agent
loop (`tool_agent`, `single_turn_agent`, ...) forwards to the inference server as they are.
"""

from __future__ import annotations

from contextvars import ContextVar

# None: not running under a cleaner worker (the loop then infers validation from the sampling params).
VALIDATING: ContextVar[bool | None] = ContextVar("cleaner_validating", default=None)
