"""verl's `cpu` platform: device `cpu`, collectives over `gloo`, Ray resource `CPU`.

verl reaches the accelerator only through `verl.plugin.platform.get_platform()` (and the helpers of
`verl.utils.device` built on it). This platform answers for a machine without one: CUDA-only notions
(streams' memory pools, NVTX ranges, the profiler, IPC handles, the CUDA runtime) become no-ops or
`None`, and `device_module` is a small namespace that gives `torch.cpu` the memory and RNG calls verl
makes on `torch.cuda` (`empty_cache`, `mem_get_info`, `get_rng_state`, ...).

It is selected only explicitly (`VERL_PLATFORM=cpu`): auto-detection never picks it, so a GPU machine with
verl_cpu installed keeps verl's own choice.
"""

from __future__ import annotations

import contextlib
import os
import types
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from . import PLATFORM_NAME


def _available_and_total_bytes() -> tuple[int, int]:
    pages = os.sysconf("SC_PHYS_PAGES")
    free_pages = os.sysconf("SC_AVPHYS_PAGES")
    page_size = os.sysconf("SC_PAGE_SIZE")
    return free_pages * page_size, pages * page_size


def _zero(*_args: Any, **_kwargs: Any) -> int:
    return 0


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _build_device_module() -> types.ModuleType:
    """`torch.cpu` plus the `torch.cuda` calls verl makes that have no CPU meaning (memory pools, IPC)."""
    module = types.ModuleType("verl_cpu_device")
    for name in ("Event", "Stream", "StreamContext", "current_stream", "stream", "synchronize", "is_available"):
        setattr(module, name, getattr(torch.cpu, name))
    module.device_count = lambda: 1
    module.current_device = lambda: "cpu"
    module.set_device = _noop
    module.get_device_name = lambda *_: "cpu"
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    module.get_rng_state = lambda *_: torch.get_rng_state()
    module.set_rng_state = lambda state, *_: torch.set_rng_state(state)
    module.empty_cache = _noop
    module.ipc_collect = _noop
    module.set_per_process_memory_fraction = _noop
    module.reset_peak_memory_stats = _noop
    module.mem_get_info = lambda *_: _available_and_total_bytes()
    # There is no separate device memory: verl's memory logs read 0 (process RSS is in the benchmark instead).
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, _zero)
    return module


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform for CPU-only machines (training on gloo, rollout on the `cpu` backend)."""

    def __init__(self) -> None:
        self._device_module = _build_device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return self._device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only `VERL_PLATFORM=cpu` selects it (verl's detection loop calls this).
        return False

    def current_device(self) -> str:
        # verl passes this straight to `tensor.to(...)` / `to_empty(device=...)`; the index 0 would mean cuda:0.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets no visibility variable for CPUs; a name nobody reads keeps verl's env plumbing harmless.
        return "VERL_CPU_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        # Ray rejects "CPU" inside `resources=`; a worker's share of its bundle is `num_cpus`.
        return {"num_cpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
