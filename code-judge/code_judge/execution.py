"""What one sandboxed run needs and what it returns: the contract between the worker and the sandbox."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class LimitHit(str, Enum):
    WALL_TIME = "wall_time"
    CPU_TIME = "cpu_time"
    MEMORY = "memory"
    OUTPUT = "output"  # output beyond the cap was discarded (the run itself may have succeeded)
    FILE_SIZE = "file_size"
    PROCESSES = "processes"


@dataclass(frozen=True)
class Limits:
    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_bytes: int = 256 * 1024 * 1024
    max_output_bytes: int = 1_000_000  # read with this cap while the program runs; the rest is discarded
    max_processes: int = 64
    max_file_size_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class ExecutionResult:
    exit_code: int | None  # None when killed by a signal
    signal: int | None  # the signal that ended the program, if any
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    cost_s: float  # measured by the supervisor, never reported by the program
    limit_hit: LimitHit | None
    exception_type: str | None  # e.g. "NameError" for an uncaught exception, "SyntaxError" before running
    exception_line: int | None = None  # line in the user's own source where it was raised
    exception_message: str | None = None  # str(exception), capped
    cpu_s: float | None = None  # CPU seconds of every process of the run, None where unknown
    # Stopped by the wall-clock cap while waiting for a CPU it did not get (see SandboxConfig.starved_cpu_share):
    # an outcome of the machine's load, not of the program.
    starved: bool = False

    @property
    def run_success(self) -> bool:
        failed_limits = (LimitHit.WALL_TIME, LimitHit.CPU_TIME, LimitHit.MEMORY)
        return self.exit_code == 0 and self.signal is None and self.limit_hit not in failed_limits


class SandboxLike(Protocol):
    """What runs a program: `code_judge.sandbox.Sandbox`, or a stand-in in tests and benchmarks."""

    mode: str

    def run(
        self, source: str, stdin: str, limits: Limits, on_long: Callable[[], object] | None = None
    ) -> ExecutionResult: ...

    def close(self) -> None: ...
