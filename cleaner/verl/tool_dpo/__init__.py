"""Negative samples and the DPO-style tool-call advantage (the CLEANER paper's ablation; off by default).

- `estimator`: `grpo_tool_dpo` and `dapo_tool_dpo`, registered with verl's advantage-estimator registry when
  this package is imported (the cleaner verl plugin imports it, so every process that imports verl has them);
- `hooks`: the v1 trainer hook that gives them the old log-probs and the pairing;
- `negative_outputs`: the agent loop's extra outputs, one per kept negative;
- `checks` / `settings`: the config keys and their config-time checks.

docs/negative-samples.md describes the whole feature.
"""

from __future__ import annotations

from typing import Any

from cleaner.verl.tool_dpo import hooks
from cleaner.verl.tool_dpo.checks import check_tool_dpo_config
from cleaner.verl.tool_dpo.estimator import DAPO_TOOL_DPO, ESTIMATORS, GRPO_TOOL_DPO

__all__ = ["DAPO_TOOL_DPO", "ESTIMATORS", "GRPO_TOOL_DPO", "check_tool_dpo_config", "install"]


def install(config: Any) -> None:
    """At trainer start-up (the cleaner agent-loop manager calls it): check the settings, hook the v1 trainer."""
    check_tool_dpo_config(config)
    hooks.install()
