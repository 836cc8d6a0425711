"""The `cpu` platform and the CPU patches against the installed verl: selection, loud failures, patched behaviour.

The patch checks run against verl's real source, so a verl upgrade that moves or rewrites a patched function
fails here (and at start-up) instead of being patched blindly.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verl_cpu import patches

pytestmark = pytest.mark.slow  # starts Ray and verl's trainer in subprocesses: tens of seconds per test

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "verl_cpu.plugin"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {key: value for key, value in os.environ.items() if not key.startswith("VERL_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=180,
    )


def test_every_patched_verl_function_still_contains_what_the_patch_replaces():
    patches.check_all()


def test_a_patch_whose_verl_code_moved_refuses_to_apply():
    moved = patches.Patch(
        name="moved",
        module="verl.utils.distributed",
        attr="initialize_global_process_group_ray",
        fragment="code verl no longer has",
        build=lambda original: original,
    )
    with pytest.raises(patches.VerlPatchError, match="no longer contains 'code verl no longer has'"):
        moved.apply()
    gone = patches.Patch(
        name="gone",
        module="verl.utils.distributed",
        attr="no_such_function",
        fragment="x",
        build=lambda original: original,
    )
    with pytest.raises(patches.VerlPatchError, match="not found"):
        gone.check()


def test_cpu_platform_trains_on_gloo_and_sizes_pools_by_ray_cpus():
    result = _run(
        """
        import os
        import ray, torch.distributed as dist
        from verl.plugin.platform import get_platform
        from verl.single_controller.ray.base import ResourcePoolManager
        from verl.workers.engine.base import EngineRegistry
        import verl.workers.engine_workers as engine_workers

        platform = get_platform()
        assert (platform.device_name, platform.communication_backend_name(), platform.ray_resource_name()) == (
            "cpu", "gloo", "CPU"), platform
        assert platform.ray_resource_options(0.5) == {"num_cpus": 0.5}
        assert EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__ == "FSDPEngineWithLMHead"

        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        engine_workers.initialize_global_process_group_ray(timeout_second=None)
        print("backend", dist.get_backend())

        ray.init(num_cpus=1, include_dashboard=False)
        try:
            ResourcePoolManager({"global_pool": [1]}, mapping={})._check_resource_available()
            ResourcePoolManager({"global_pool": [3]}, mapping={})._check_resource_available()
        except ValueError as exc:
            print("refused:", exc)
        finally:
            ray.shutdown()
        """,
        VERL_PLATFORM="cpu",
        VERL_USE_EXTERNAL_MODULES=PLUGIN,
        PORT=str(_free_port()),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "backend gloo" in result.stdout
    assert "refused: Ray has 1 CPU available but the resource pools need 3" in result.stdout


@pytest.mark.parametrize("route", ["entry point", "external modules"])
def test_without_verl_platform_cpu_the_plugin_registers_and_patches_nothing(route):
    # A GPU machine with the package installed: verl's own platform choice, no `cpu` rollout, verl unpatched.
    result = _run(
        """
        from verl.plugin.platform import PlatformRegistry, get_platform
        from verl.workers.rollout.replica import RolloutReplicaRegistry
        import verl.utils.distributed as distributed
        import verl_cpu.plugin
        print(get_platform().device_name, "cpu" in PlatformRegistry.registered_names(),
              "cpu" in RolloutReplicaRegistry._registry,
              hasattr(distributed.initialize_global_process_group_ray, "__verl_cpu_original__"))
        """,
        **({} if route == "entry point" else {"VERL_USE_EXTERNAL_MODULES": PLUGIN}),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["cuda", "False", "False", "False"]


def test_the_entry_point_alone_registers_everything_when_cpu_is_selected():
    # `pip install verl-cpu` + VERL_PLATFORM=cpu is the whole switch: verl loads the `verl.plugins` entry point.
    result = _run(
        """
        from verl.plugin.platform import get_platform
        from verl.workers.rollout.replica import get_rollout_replica_class
        from verl.workers.engine.base import EngineRegistry
        print(get_platform().device_name, get_rollout_replica_class("cpu").__name__,
              EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__)
        """,
        VERL_PLATFORM="cpu",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["cpu", "CpuRolloutReplica", "FSDPEngineWithLMHead"]


def test_selecting_cpu_without_the_plugin_fails_at_once_with_the_cause():
    # No fallback to `nvidia` (which would then wait forever for a GPU placement group).
    result = _run("import verl.trainer.main_ppo", VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_PLUGINS="none")
    assert result.returncode != 0
    assert "Unknown platform 'cpu'" in result.stderr
    broken = _run("import verl", VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="verl_cpu.no_such_plugin")
    assert broken.returncode != 0 and "No module named 'verl_cpu.no_such_plugin'" in broken.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
