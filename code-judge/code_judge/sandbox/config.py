"""How a sandbox is set up: isolation mode, the interpreter inside it, what it preloads, who it runs as."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("bwrap", "insecure")


@dataclass(frozen=True)
class SandboxConfig:
    mode: str = "bwrap"  # "bwrap" (default) | "insecure" (explicit opt-in, no isolation)
    python: str = "/usr/bin/python3"  # Debian's python (pyenv's lives under root's 0700 home)
    preload: tuple[str, ...] = ("math", "numpy", "sympy")
    # Preloads that make every fork dearer (numpy+sympy: ~1.3 ms of CPU per run). A program that never names one
    # runs in a second, light zygote without them; () keeps a single zygote with every preload.
    heavy_modules: tuple[str, ...] = ("numpy", "sympy")
    uid: int = 65534  # unprivileged user the program runs as (used when the supervisor is root)
    warm_up: bool = True  # exercise sympy once at start-up (+~1 s) so its lazy imports are not paid per program
    scratch_bytes: int = 256 * 1024 * 1024  # size of the private tmpfs holding each run's writable dir
    startup_timeout_s: float = 60.0  # importing the preloads on a loaded 2-core machine can take seconds
    backstop_s: float = 0.5  # how long after the wall limit the supervisor stops waiting for the zygote
    # A run still going after this many seconds is long: the caller is told (Sandbox.run on_long) and, once it
    # has used `demote_cpu_s` of CPU, its processes drop to `demoted_nice`, so short runs and the service itself
    # get the CPU first (see priority.py).
    demote_after_s: float = 0.5
    demote_cpu_s: float = 0.25
    demoted_nice: int = 0  # the nice value of long runs; 0 keeps them at the default priority (the service sets it)
    # A run stopped by the wall-clock cap is starved, not slow, when it waited for a CPU for at least half of
    # its time and still received less than this share of one CPU: the machine, not the program, stopped it.
    starved_cpu_share: float = 0.02
    # Zygotes of the flavour that runs plain programs (the light one, when there is one) started with the sandbox,
    # so that this many overlapping runs find a warm zygote instead of waiting for a new one (~60 ms of CPU each
    # for a light zygote). The heavy flavour starts with one when it is not that flavour. More start on demand.
    warm_zygotes: int = 1

    @property
    def light_preload(self) -> tuple[str, ...] | None:
        """What the light zygote preloads, or None when every program runs in the one zygote with `preload`."""
        if not set(self.preload) & set(self.heavy_modules):
            return None
        return tuple(name for name in self.preload if name not in self.heavy_modules)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sandbox mode must be one of {MODES}, got {self.mode!r}")
        if not self.python.startswith("/"):
            raise ValueError(f"sandbox python must be an absolute path, got {self.python!r}")
        if self.uid < 0:
            raise ValueError(f"sandbox uid must be >= 0, got {self.uid}")
        if self.scratch_bytes <= 0:
            raise ValueError(f"scratch_bytes must be positive, got {self.scratch_bytes}")
        if self.demote_after_s <= 0:
            raise ValueError(f"demote_after_s must be positive, got {self.demote_after_s}")
        if self.demote_cpu_s < 0:
            raise ValueError(f"demote_cpu_s must be >= 0, got {self.demote_cpu_s}")
        if not 0 <= self.demoted_nice <= 19:
            raise ValueError(f"demoted_nice must be within 0..19, got {self.demoted_nice}")
        if self.warm_zygotes < 1:
            raise ValueError(f"warm_zygotes must be >= 1, got {self.warm_zygotes}")
        if not 0 <= self.starved_cpu_share < 1:
            raise ValueError(f"starved_cpu_share must be within [0, 1), got {self.starved_cpu_share}")
