"""Registers the CPU pieces with verl; verl imports this module in every process through `VERL_USE_EXTERNAL_MODULES`.

`recipe/cleaner/cpu_smoke.sh` exports `VERL_USE_EXTERNAL_MODULES=cleaner.verl.cpu.plugin` and `VERL_PLATFORM=cpu`;
Ray's workers inherit both, so the driver, the TaskRunner, the trainer workers, the agent-loop and reward
workers all import this at `import verl`. verl imports these modules without a try/except, so any failure here
stops `import verl` with its cause, instead of falling back to the `nvidia` platform and then waiting forever
for a GPU placement group. The patches (`patches.py`) are applied only when `VERL_PLATFORM=cpu`, so a GPU run
that happens to import this module sees verl unchanged.
"""

from __future__ import annotations

import os

# The platform first: importing verl's engine and rollout modules already asks verl for the platform.
from .platform import PLATFORM_NAME, PlatformCPU  # isort: skip
from . import patches
from .engines import register_fsdp_engines
from .rollout import ROLLOUT_NAME, register

MODULE = __name__
PLATFORM_ENV = "VERL_PLATFORM"
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"


def cpu_platform_selected() -> bool:
    return os.environ.get(PLATFORM_ENV, "").strip().lower() == PLATFORM_NAME


register()
register_fsdp_engines()
if cpu_platform_selected():
    patches.apply_all()

__all__ = ["MODULE", "PLATFORM_NAME", "ROLLOUT_NAME", "PlatformCPU", "cpu_platform_selected"]
