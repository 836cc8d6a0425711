"""verl's DAPO reward manager, plus the one thing its naive sibling does and it does not.

verl 0.9.1's naive manager merges the agent loop's `extra_fields` (our `saar_*` statistics) into the reward
function's `extra_info`; the DAPO manager (overlong buffer, used by every CLEANER recipe) does not. Select
this one with
    reward.reward_manager.source=importlib
    reward.reward_manager.name=CleanerDAPORewardManager
    reward.reward_manager.module.path=pkg://cleaner.verl.reward_manager
so `compute_score` can copy the statistics into its result, and verl's validation dumps carry them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager


class CleanerDAPORewardManager(DAPORewardManager):
    async def run_single(self, data: DataProto) -> dict[str, Any]:
        return await super().run_single(with_tool_extra_fields(data))


def with_tool_extra_fields(data: DataProto) -> DataProto:
    """A shallow copy of `data` whose `extra_info` rows also hold each row's agent-loop `extra_fields`."""
    tool_extra_fields = data.non_tensor_batch.get("tool_extra_fields")
    if tool_extra_fields is None:
        return data
    extra_info = data.non_tensor_batch.get("extra_info")
    merged = np.empty(len(tool_extra_fields), dtype=object)
    merged[:] = [
        {**(extra_info[i] if extra_info is not None else {}), **fields} for i, fields in enumerate(tool_extra_fields)
    ]
    return DataProto(
        batch=data.batch, non_tensor_batch={**data.non_tensor_batch, "extra_info": merged}, meta_info=data.meta_info
    )
