"""Registers the CPU pieces with verl when the `cpu` platform is selected (`VERL_PLATFORM=cpu`).

verl imports this module at `import verl` in every process (driver, TaskRunner, trainer workers, agent-loop
and reward workers), by either of its own plugin routes:

- the `verl.plugins` entry point this package installs (verl loads every entry point of that group unless
  `VERL_USE_EXTERNAL_PLUGINS` says otherwise, and swallows a failing one, logging it only at DEBUG);
- `VERL_USE_EXTERNAL_MODULES=verl_cpu.plugin` (imported without a try/except, so a plugin that fails to
  import stops every process with its traceback instead of verl later reporting `Unknown platform 'cpu'`).

Ray's workers inherit `VERL_PLATFORM`, so every process registers the same pieces. Without `VERL_PLATFORM=cpu`
this module registers and patches nothing: a GPU machine with the package installed sees verl unchanged.
"""

from __future__ import annotations

import os

from . import PLATFORM_NAME

PLATFORM_ENV = "VERL_PLATFORM"
MODULE = __name__


def cpu_platform_selected() -> bool:
    return os.environ.get(PLATFORM_ENV, "").strip().lower() == PLATFORM_NAME


def register_all() -> None:
    """The platform, the FSDP engines for device `cpu`, the `cpu` rollout backend, then the patches."""
    # The platform first: importing verl's engine and rollout modules already asks verl for the platform.
    from . import (
        patches,
        platform,  # noqa: F401  (its class decorator registers it)
    )
    from .engines import register_fsdp_engines
    from .rollout import register

    register()
    register_fsdp_engines()
    patches.apply_all()


if cpu_platform_selected():
    register_all()
