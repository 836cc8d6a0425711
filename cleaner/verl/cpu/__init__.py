"""CLEANER's side of the CPU run: the smoke run's data (`smoke_data`).

The CPU platform, engines, rollout backend and patches are the `verl_cpu` package (`verl-cpu/`). Importing one
of their old module paths here (`cleaner.verl.cpu.plugin`, for example in `VERL_USE_EXTERNAL_MODULES`) raises
an ImportError naming the new one, instead of a bare "No module named".
"""

from __future__ import annotations

import importlib.abc
import sys

MOVED = {
    f"{__name__}.{old}": f"verl_cpu.{new}"
    for old, new in {
        "plugin": "plugin",
        "platform": "platform",
        "engines": "engines",
        "patches": "patches",
        "rollout": "rollout",
        "server": "server",
        "generation": "decoding, verl_cpu.sampling, verl_cpu.prefix_cache",
        "weight_major": "weight_major",
        "ray_cleanup": "ray_cleanup",
    }.items()
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            raise ImportError(
                f"{fullname} moved to the verl-cpu package: use {MOVED[fullname]} "
                "(VERL_USE_EXTERNAL_MODULES=verl_cpu.plugin, rollout name `cpu`)",
                name=fullname,
            )
        return None


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())
