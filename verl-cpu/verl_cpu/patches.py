"""The few places where verl 0.9.1 assumes an accelerator outside its platform layer, patched for the CPU platform.

Every patch names the verl function it replaces and a fragment of that function's source that shows the
CUDA assumption. `apply_all()` checks each fragment before patching: if a verl upgrade moves or rewrites
the code, it raises `VerlPatchError` naming the function instead of patching something it no longer
understands (tests/test_platform_and_patches.py runs the same check). Applied only when the `cpu` platform is
selected, so GPU runs see verl unchanged. The package README lists them.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

CPU_BACKEND = "gloo"


class VerlPatchError(RuntimeError):
    """verl's code no longer looks like what a CPU patch replaces."""


@dataclass(frozen=True)
class Patch:
    """Replace `module.attr` (looked up in every module in `also_bound_in` too, where it was imported by name)."""

    name: str
    module: str
    attr: str
    fragment: str  # must occur in the original's source: the assumption being replaced
    build: Callable[[Any], Any]  # original -> replacement
    also_bound_in: tuple[str, ...] = ()

    def target(self) -> Any:
        owner_name, _, member = self.attr.rpartition(".")
        owner = importlib.import_module(self.module)
        for part in filter(None, owner_name.split(".")):
            owner = getattr(owner, part)
        return owner, member

    def original(self) -> Any:
        owner, member = self.target()
        function = getattr(owner, member)
        return getattr(function, "__verl_cpu_original__", function)

    def check(self) -> None:
        try:
            source = inspect.getsource(self.original())
        except (AttributeError, ImportError, OSError, TypeError) as exc:
            raise VerlPatchError(f"CPU patch {self.name!r}: {self.module}.{self.attr} not found ({exc})") from exc
        if self.fragment not in source:
            raise VerlPatchError(
                f"CPU patch {self.name!r}: {self.module}.{self.attr} no longer contains {self.fragment!r}; "
                "verl changed this code, revisit verl_cpu/patches.py"
            )

    def apply(self) -> None:
        owner, member = self.target()
        if hasattr(getattr(owner, member), "__verl_cpu_original__"):
            return
        self.check()
        original = self.original()
        bound = [importlib.import_module(name) for name in self.also_bound_in]
        for module in bound:
            if getattr(module, member, None) is not original:
                raise VerlPatchError(
                    f"CPU patch {self.name!r}: {module.__name__}.{member} is not verl's {self.module}.{self.attr}"
                )
        replacement = self.build(original)
        replacement.__verl_cpu_original__ = original
        for holder in (owner, *bound):
            setattr(holder, member, replacement)


def _process_group_on_gloo(original: Callable[..., None]) -> Callable[..., None]:
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or CPU_BACKEND)

    return initialize_global_process_group_ray


def _check_platform_resource(_original: Callable[..., None]) -> Callable[..., None]:
    def _check_resource_available(self) -> None:
        import ray
        from verl.plugin.platform import get_platform

        resource = get_platform().ray_resource_name()
        available = sum(node.get(resource, 0) for node in ray._private.state.available_resources_per_node().values())
        required = sum(count for nodes in self.resource_pool_spec.values() for count in nodes)
        if available < required:
            raise ValueError(
                f"Ray has {available:g} {resource} available but the resource pools need {required} "
                f"(trainer.n_gpus_per_node x nnodes): give Ray more CPUs (ray_kwargs.ray_init.num_cpus) "
                "or lower trainer.n_gpus_per_node"
            )

    return _check_resource_available


PATCHES = (
    Patch(
        name="process group on gloo",
        module="verl.utils.distributed",
        attr="initialize_global_process_group_ray",
        fragment='f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"',
        build=_process_group_on_gloo,
        also_bound_in=("verl.workers.engine_workers",),
    ),
    Patch(
        name="resource check counts the platform's Ray resource",
        module="verl.single_controller.ray.base",
        attr="ResourcePoolManager._check_resource_available",
        fragment='node_info.get("GPU", 0) if "GPU" in node_info else node_info.get("NPU", 0)',
        build=_check_platform_resource,
    ),
)


def check_all() -> None:
    """Raise `VerlPatchError` if any patched verl function changed (without patching anything)."""
    for patch in PATCHES:
        patch.check()


def apply_all() -> None:
    for patch in PATCHES:
        patch.apply()
        logger.debug("CPU patch applied: %s (%s.%s)", patch.name, patch.module, patch.attr)
