"""A SAAR-aware MultiTurnConfig for the recipe dry-run tests.

verl 0.9.1 turns `actor_rollout_ref.rollout` into its `RolloutConfig` dataclass (in every agent-loop and
rollout worker), and `MultiTurnConfig` rejects unknown keys such as `enable_tool_rollback`. A recipe
therefore has to name a subclass with the SAAR fields (SAAR_MULTI_TURN_CONFIG); this one stands in for the
package's until that exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl.workers.config import MultiTurnConfig


@dataclass
class SaarMultiTurnConfig(MultiTurnConfig):
    enable_tool_rollback: bool = False
    max_tool_retries: int = 3
    rollback_probability: float = 1.0
    rollback_similarity_threshold: float = 0.5
    rollback_similarity: str = "difflib"
    rollback_in_validation: bool = False
    rollback_on_errors: Any = None
    rollback_seed: int = 0
