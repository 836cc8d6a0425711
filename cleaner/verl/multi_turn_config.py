"""`SaarMultiTurnConfig`: verl's `MultiTurnConfig` plus the SAAR keys.

verl 0.9.1 turns `actor_rollout_ref.rollout.multi_turn` into its `MultiTurnConfig` dataclass in every process
and rejects unknown keys. This subclass lets the reference recipes' overrides
(`+actor_rollout_ref.rollout.multi_turn.enable_tool_rollback=True`, ...) pass that conversion. Select it with
`actor_rollout_ref.rollout.multi_turn._target_=cleaner.verl.multi_turn_config.SaarMultiTurnConfig`.
Its fields are `cleaner.saar.config.CONFIG_KEYS`, so every SAAR key (the off-policy ones included) is accepted.
"""

from __future__ import annotations

from dataclasses import field, make_dataclass
from typing import Any

from verl.workers.config.rollout import MultiTurnConfig

from cleaner.purify.config import CONFIG_KEYS as PURIFICATION_KEYS
from cleaner.saar.config import CONFIG_KEYS

MODULE = "cleaner.verl.multi_turn_config"

# None means "SaarConfig's default": the agent loop validates and applies the values (cleaner.saar.config).
SaarMultiTurnConfig = make_dataclass(
    "SaarMultiTurnConfig",
    [(key, Any, field(default=None)) for key in (*CONFIG_KEYS, *PURIFICATION_KEYS)],
    bases=(MultiTurnConfig,),
    namespace={"__module__": MODULE},
)
MULTI_TURN_TARGET = f"{MODULE}.SaarMultiTurnConfig"
