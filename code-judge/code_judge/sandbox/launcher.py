"""The command line that starts a zygote, and the check that it can start at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from .config import SandboxConfig
from .errors import SandboxUnavailable

ZYGOTE_SOURCE = (Path(__file__).parent / "zygote.py").read_text()
INSECURE_HINT = "pass SandboxConfig(mode='insecure') (the service's explicit insecure flag) to run without isolation"
# Single-threaded BLAS keeps the zygote fork-safe and stops one program from taking every core.
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Top-level system directories made visible read-only; nothing else of the host (the service's files,
# /home, /root, /work, /run, /var) exists inside the sandbox.
SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SCRATCH_DIRS = ("/tmp", "/dev/shm")


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    user: int | None  # uid/gid to switch to before exec, None to stay who we are


def launch_spec(config: SandboxConfig, control_fd: int) -> LaunchSpec:
    zygote_config = {
        "mode": config.mode,
        "control_fd": control_fd,
        "preload": list(config.preload),
        "warm_up": config.warm_up,
        "scratch_dirs": list(SCRATCH_DIRS),
    }
    python = [config.python, "-I", "-B", "-c", ZYGOTE_SOURCE, json.dumps(zygote_config)]
    if config.mode == "insecure":
        return LaunchSpec(argv=python, env=dict(SANDBOX_ENV), user=None)
    return LaunchSpec(argv=bwrap_argv(config) + python, env={}, user=sandbox_user(config))


def sandbox_user(config: SandboxConfig) -> int | None:
    # Only root can switch users; an unprivileged supervisor runs the sandbox as itself.
    if os.geteuid() != 0 or config.uid == os.geteuid():
        return None
    return config.uid


def start_process(spec: LaunchSpec, **popen_args) -> subprocess.Popen:
    """Popen the spec as its user; failing to switch user or exec is SandboxUnavailable, with the reason."""
    try:
        return subprocess.Popen(
            spec.argv,
            env=spec.env,
            user=spec.user,
            group=spec.user,
            extra_groups=[] if spec.user is not None else None,
            stdin=subprocess.DEVNULL,
            **popen_args,
        )
    except OSError as error:
        who = f"uid {spec.user}" if spec.user is not None else "the current user"
        raise SandboxUnavailable(f"cannot start {spec.argv[0]} as {who}: {error}") from error


def bwrap_argv(config: SandboxConfig) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap is not installed (apt-get install bubblewrap); {INSECURE_HINT}")
    argv = [
        bwrap,
        "--unshare-all",  # network (only a private loopback), pid, ipc, uts, cgroup
        "--unshare-user",
        "--disable-userns",  # no nested user namespaces: less kernel surface for the program
        "--die-with-parent",
        "--as-pid-1",  # the zygote is init: the program cannot signal it, and kill(-1) reaches only the program
        "--new-session",
    ]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    for path in SCRATCH_DIRS:
        argv += ["--size", str(config.scratch_bytes), "--perms", "0700", "--tmpfs", path]
    argv += ["--remount-ro", "/", "--clearenv", "--chdir", "/tmp"]
    for name, value in SANDBOX_ENV.items():
        argv += ["--setenv", name, value]
    return argv + ["--setenv", "HOME", "/tmp"]


def check_sandbox_support(config: SandboxConfig) -> None:
    """Raise SandboxUnavailable, saying why, when a zygote with this config cannot start here."""
    if not os.access(config.python, os.X_OK):
        raise SandboxUnavailable(f"sandbox python {config.python} is missing or not executable")
    probe = f"import {', '.join(config.preload)}" if config.preload else "pass"
    spec = launch_spec(config, control_fd=-1)
    argv = spec.argv[: spec.argv.index("-c") + 1] + [probe]
    process = start_process(replace(spec, argv=argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, stderr = process.communicate(timeout=config.startup_timeout_s)
    except subprocess.TimeoutExpired as error:
        process.kill()
        process.wait()
        raise SandboxUnavailable(f"the sandbox did not start within {config.startup_timeout_s} s") from error
    if process.returncode != 0:
        detail = stderr.decode(errors="replace").strip()[-2000:]
        hint = f"; {INSECURE_HINT}" if config.mode == "bwrap" else ""
        raise SandboxUnavailable(
            f"{config.mode} sandbox cannot run {config.python} with {probe!r} "
            f"(exit {process.returncode}): {detail}{hint}"
        )
