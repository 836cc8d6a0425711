"""The DPO-style adjustment's settings, read from verl's `algorithm` section (the reference code's keys).

| key | default | meaning |
|---|---|---|
| `algorithm.use_dpo_on_tool_calls` | false | add the adjustment; off, the estimator is GRPO with negatives left out |
| `algorithm.dpo_beta` | 0.1 | beta, > 0 |
| `algorithm.dpo_max_adjustment_ratio` | 0.1 | cap on the adjustment of one token, > 0. Despite the name it is an absolute amount added to (or taken from) a token's advantage, not a ratio of it |

Nothing here imports verl, so the config checks can use it anywhere. The keys are not in verl's `algorithm` schema, so recipes pass them with a `+` (`+algorithm.dpo_beta=0.1`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The registered advantage estimators (cleaner.verl.tool_dpo.estimator); spelled here, where no verl is imported.
GRPO_TOOL_DPO = "grpo_tool_dpo"
DAPO_TOOL_DPO = "dapo_tool_dpo"
ESTIMATORS = (GRPO_TOOL_DPO, DAPO_TOOL_DPO)

USE_DPO_KEY = "use_dpo_on_tool_calls"
BETA_KEY = "dpo_beta"
MAX_ADJUSTMENT_KEY = "dpo_max_adjustment_ratio"


class ToolDpoConfigError(ValueError):
    """The negative-sample / tool-call DPO settings cannot run; the message names the key."""


@dataclass(frozen=True)
class ToolDpoSettings:
    use_dpo_on_tool_calls: bool = False
    dpo_beta: float = 0.1
    dpo_max_adjustment_ratio: float = 0.1

    def __post_init__(self) -> None:
        if not isinstance(self.use_dpo_on_tool_calls, bool):
            raise ToolDpoConfigError(
                f"algorithm.{USE_DPO_KEY} must be true or false, got {self.use_dpo_on_tool_calls!r}"
            )
        for key, value in ((BETA_KEY, self.dpo_beta), (MAX_ADJUSTMENT_KEY, self.dpo_max_adjustment_ratio)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ToolDpoConfigError(f"algorithm.{key} must be a number > 0, got {value!r}")

    @classmethod
    def from_algorithm(cls, algorithm: Mapping[str, Any] | None) -> ToolDpoSettings:
        """From verl's `algorithm` section (a DictConfig or dict); absent or null keys keep the defaults."""
        section = algorithm or {}
        values = {
            key: section[key]
            for key in (USE_DPO_KEY, BETA_KEY, MAX_ADJUSTMENT_KEY)
            if key in section and section[key] is not None
        }
        return cls(**values)
