"""verl's DAPO reward manager, plus the one thing its naive sibling does and it does not.

verl 0.9.1's naive manager merges the agent loop's `extra_fields` (our `saar_*` statistics) into the reward
function's `extra_info`; the DAPO manager (overlong buffer, used by every CLEANER recipe) does not. Select
this one with
    reward.reward_manager.source=importlib
    reward.reward_manager.name=CleanerDAPORewardManager
    reward.reward_manager.module.path=pkg://cleaner.rewards.manager
so `compute_score` can copy the statistics into its result, and verl's validation dumps carry them.
"""

from __future__ import annotations

from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager


class CleanerDAPORewardManager(DAPORewardManager):
    async def run_single(self, data: DataProto) -> dict[str, Any]:
        return await super().run_single(with_tool_extra_fields(data))


def with_tool_extra_fields(data: DataProto) -> DataProto:
    """A shallow copy of `data` whose last row's `extra_info` also holds that row's agent-loop `extra_fields`."""
    tool_extra_fields = data.non_tensor_batch.get("tool_extra_fields")
    if tool_extra_fields is None:
        return data
    extra_info = data.non_tensor_batch.get("extra_info")
    merged = extra_info.copy() if extra_info is not None else tool_extra_fields.copy()
    merged[-1] = {**(merged[-1] if extra_info is not None else {}), **tool_extra_fields[-1]}
    return DataProto(
        batch=data.batch,
        non_tensor_batch={**data.non_tensor_batch, "extra_info": merged},
        meta_info=data.meta_info,
    )
