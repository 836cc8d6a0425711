"""Service settings, read from the same environment variables as upstream code-judge (plus a few of our own)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from code_judge.cpp import CppConfig
from code_judge.execution import Limits

MIB = 1024 * 1024


class SettingsError(ValueError):
    """A setting (environment variable) has an invalid value."""


@dataclass(frozen=True)
class JudgeSettings:
    # None: `code-judge serve` starts and owns a private redis-server.
    redis_uri: str | None = None
    redis_key_prefix: str = "js"
    max_execution_time: float = 10.0  # seconds of wall time per run: the cap that also stops sleeping programs
    max_cpu_time: float | None = None  # seconds of CPU time per run (its budget); None: MAX_EXECUTION_TIME
    max_memory: int = 256  # MiB (upstream: MB) of memory per run
    max_output_bytes: int = 1_000_000  # captured per stream while the program runs; the rest is discarded
    max_processes: int = 64
    max_file_size_mb: int = 16
    max_stdout_error_length: int = 1000  # characters of stdout/stderr returned to the client
    max_workers: int = field(default_factory=lambda: os.cpu_count() or 1)  # worker processes
    # Programs one worker runs at once. A program that sleeps or loops holds a slot, not a core, so there are far
    # more slots than cores: 16 per worker lets 50 infinite loops run beside short programs on 2 cores.
    worker_slots: int = 16
    # Of those, how many may hold a run younger than DEMOTE_AFTER. A run that goes on longer frees its short
    # slot, so the worker takes the next job: short programs never wait behind long ones while slots are left.
    worker_short_slots: int = 4
    demote_after: float = 0.5  # seconds of wall time after which a run is long
    # A long run that has used this many CPU seconds drops to DEMOTED_NICE until just before its cap, so short
    # programs and the service get the CPU first. Mild on purpose: a long run must still get a fair share of a
    # machine that others load too, or it would be starved.
    demote_cpu: float = 0.25
    demoted_nice: int = 5  # 0: long runs keep the default CPU priority
    # A run stopped by the wall cap after waiting for a CPU at least half the time, having received less than this
    # share of one CPU, answers `worker_starved` (the machine's load stopped it) instead of `worker_timeout`.
    starved_cpu_share: float = 0.02
    # How long a request may wait when the client sends no deadline. Upstream expired queued items after 4 s and
    # answered `queue_timeout`; here nothing expires silently, the queue is bounded instead.
    max_queue_wait_time: float = 3600.0
    max_queue_length: int = 100_000  # beyond this, new requests get 503 + Retry-After (overload)
    max_attempts: int = 2  # runs of one request whose worker died before the request gets `internal_error`
    worker_heartbeat_interval: float = 1.0
    worker_heartbeat_timeout: float = 5.0  # a worker silent this long is dead; its job is re-queued
    redis_result_expire: float = 60.0  # the reply list of a vanished API process is dropped after this
    redis_socket_timeout: float = 10.0
    redis_outage_timeout: float = 30.0  # pending requests fail with `internal_error` after Redis is gone this long
    python_executor_path: str = "/usr/bin/python3"
    preload_modules: tuple[str, ...] = ("math", "numpy", "sympy")
    cpp_compiler_path: str = "/usr/bin/g++"
    cpp_compile_time: float | None = None  # seconds of wall and CPU time per compile; None: MAX_EXECUTION_TIME
    cpp_compile_memory: int = 1024  # MiB of address space for g++ (cc1plus needs far more than a program)

    def __post_init__(self) -> None:
        positive = (
            "max_execution_time",
            "max_memory",
            "max_output_bytes",
            "max_processes",
            "max_file_size_mb",
            "max_stdout_error_length",
            "max_workers",
            "worker_slots",
            "worker_short_slots",
            "demote_after",
            "max_queue_wait_time",
            "max_queue_length",
            "max_attempts",
            "worker_heartbeat_interval",
            "redis_result_expire",
            "redis_socket_timeout",
            "redis_outage_timeout",
            "cpp_compile_memory",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise SettingsError(f"setting {name.upper()} must be > 0, got {getattr(self, name)!r}")
        if self.cpp_compile_time is not None and self.cpp_compile_time <= 0:
            raise SettingsError(f"setting CPP_COMPILE_TIME must be > 0, got {self.cpp_compile_time!r}")
        if self.max_cpu_time is not None and self.max_cpu_time <= 0:
            raise SettingsError(f"setting MAX_CPU_TIME must be > 0, got {self.max_cpu_time!r}")
        if self.worker_short_slots > self.worker_slots:
            raise SettingsError(
                f"WORKER_SHORT_SLOTS ({self.worker_short_slots}) cannot exceed WORKER_SLOTS ({self.worker_slots})"
            )
        if self.demote_cpu < 0:
            raise SettingsError(f"setting DEMOTE_CPU must be >= 0, got {self.demote_cpu}")
        if not 0 <= self.demoted_nice <= 19:
            raise SettingsError(f"setting DEMOTED_NICE must be within 0..19, got {self.demoted_nice}")
        if not 0 <= self.starved_cpu_share < 1:
            raise SettingsError(f"setting STARVED_CPU_SHARE must be within [0, 1), got {self.starved_cpu_share}")
        if self.worker_heartbeat_timeout <= 2 * self.worker_heartbeat_interval:
            raise SettingsError(
                "WORKER_HEARTBEAT_TIMEOUT must exceed twice WORKER_HEARTBEAT_INTERVAL, got "
                f"{self.worker_heartbeat_timeout} and {self.worker_heartbeat_interval}"
            )

    @property
    def limits(self) -> Limits:
        return Limits(
            wall_time_s=self.max_execution_time,
            cpu_time_s=self.max_execution_time if self.max_cpu_time is None else self.max_cpu_time,
            memory_bytes=self.max_memory * MIB,
            max_output_bytes=self.max_output_bytes,
            max_processes=self.max_processes,
            max_file_size_bytes=self.max_file_size_mb * MIB,
        )

    @property
    def cpp(self) -> CppConfig:
        return CppConfig(
            compiler=self.cpp_compiler_path,
            compile_time_s=self.max_execution_time if self.cpp_compile_time is None else self.cpp_compile_time,
            compile_memory_bytes=self.cpp_compile_memory * MIB,
            max_binary_bytes=self.max_file_size_mb * MIB,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JudgeSettings:
        """Each field is read from its upper-case name (REDIS_URI, MAX_EXECUTION_TIME, ...)."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, f.type, raw)
        return cls(**values)


def _parse(name: str, type_name: object, raw: str) -> object:
    # Annotations are strings here (`from __future__ import annotations`).
    try:
        if type_name == "int":
            return int(raw)
        if type_name in ("float", "float | None"):
            return float(raw)
        if type_name == "tuple[str, ...]":
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        return raw
    except ValueError as exc:
        raise SettingsError(f"environment variable {name.upper()}={raw!r} is not a valid {type_name}") from exc
