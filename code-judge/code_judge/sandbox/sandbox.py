"""The supervisor side: one Sandbox per worker process, running one program at a time in a warm zygote."""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import time
from dataclasses import replace

from ..execution import ExecutionResult, LimitHit, Limits
from .capture import OutputCollector, output_pipe
from .config import SandboxConfig
from .errors import SandboxCrashed, SandboxError
from .process import ZygoteProcess
from .routing import Router

logger = logging.getLogger(__name__)
# After the zygote has killed every process of a run, its output pipes close at once; this only bounds a bug.
DRAIN_S = 2.0
PROCESS_SLACK = 4
HEAVY, LIGHT = "heavy", "light"


class Sandbox:
    """One warm zygote with every preload, plus a light one without the heavy modules when `preload` has any.

    Each program runs in the light zygote unless its source names a module only the heavy one has loaded.
    """

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.mode = config.mode
        self._configs = {HEAVY: config}
        if config.light_preload is not None:
            self._configs[LIGHT] = replace(config, preload=config.light_preload)
        self._zygotes: dict[str, ZygoteProcess | None] = dict.fromkeys(self._configs)
        # Every run gets the same address-space limit, whichever zygote runs it: its memory budget on top of what
        # the largest zygote maps. So a program the router sends to the light zygote fits exactly when it would
        # fit in the heavy one, even if it imports the heavy modules itself.
        self._base_vm_bytes = 0
        try:
            for flavour in self._configs:
                self._live_zygote(flavour)
        except BaseException:
            self.close()
            raise
        heavy, light = self._zygotes[HEAVY], self._zygotes.get(LIGHT)
        self._router = Router(heavy.packages - light.packages if heavy is not None and light is not None else ())

    def run(self, source: str, stdin: str, limits: Limits) -> ExecutionResult:
        """Run one program. Any program gives a result; only the sandbox's own failures raise SandboxError."""
        check_limits(limits)
        flavour = HEAVY if LIGHT not in self._configs or self._router.needs_heavy(source) else LIGHT
        zygote = self._live_zygote(flavour)
        try:
            pipes = self._start(zygote, source, stdin, limits)
        except SandboxCrashed as error:
            # It died before taking the program (e.g. killed while idle): nothing ran, so run it in a new one.
            logger.warning("%s; starting a new zygote", error)
            zygote = self._live_zygote(flavour)
            pipes = self._start(zygote, source, stdin, limits)
        collector = OutputCollector(*pipes, cap=limits.max_output_bytes)
        try:
            started = time.monotonic()
            deadline = started + limits.wall_time_s + self.config.backstop_s
            collector.pump(deadline, stop_fd=zygote.fileno())
            try:
                reply = zygote.receive(deadline)
            except SandboxCrashed as error:
                self._forget(zygote)
                raise SandboxCrashed(f"the sandbox zygote died during a run: {error}") from error
            if reply is None:
                return self._abandon(zygote, collector, time.monotonic() - started)
            if not collector.pump(time.monotonic() + DRAIN_S):
                self._discard(zygote)
                raise SandboxError("output pipes stayed open after every process of the run was killed")
            if reply["retire"]:
                logger.warning("sandbox zygote could not clean up after a run; replacing it")
                self._forget(zygote)
                zygote.close()
            return to_result(reply, collector, limits)
        finally:
            collector.close()

    def close(self) -> None:
        for flavour, zygote in self._zygotes.items():
            if zygote is not None:
                zygote.close()
                self._zygotes[flavour] = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _live_zygote(self, flavour: str) -> ZygoteProcess:
        zygote = self._zygotes[flavour]
        if zygote is not None and not zygote.alive():
            logger.warning("sandbox zygote died between runs (%s); starting a new one", zygote.kill())
            zygote = self._zygotes[flavour] = None
        if zygote is None:
            zygote = ZygoteProcess(self._configs[flavour])
            self._zygotes[flavour] = zygote
            self._base_vm_bytes = max(self._base_vm_bytes, zygote.base_vm_bytes)
        return zygote

    def _forget(self, zygote: ZygoteProcess) -> None:
        """Drop a dead or retired zygote; the next run that needs its flavour starts a new one."""
        for flavour, held in self._zygotes.items():
            if held is zygote:
                self._zygotes[flavour] = None

    def _start(self, zygote: ZygoteProcess, source: str, stdin: str, limits: Limits) -> tuple[int, int]:
        stdout_read, stdout_write = output_pipe()
        stderr_read, stderr_write = output_pipe()
        handed_over = [
            # surrogatepass: any str is accepted; text that is not valid UTF-8 reaches the program as it would
            # from a file (a SyntaxError for source, replacement characters for input()).
            read_only_memfd("source", source.encode("utf-8", errors="surrogatepass")),
            read_only_memfd("stdin", stdin.encode("utf-8", errors="surrogatepass")),
            stdout_write,
            stderr_write,
        ]
        request = {
            "wall_time_s": limits.wall_time_s,
            "cpu_time_s": limits.cpu_time_s,
            "address_space_bytes": self._base_vm_bytes + limits.memory_bytes,
            "max_processes": limits.max_processes,
            "max_file_size_bytes": limits.max_file_size_bytes,
        }
        try:
            zygote.send(request, handed_over)
        except SandboxCrashed:
            self._forget(zygote)
            os.close(stdout_read)
            os.close(stderr_read)
            raise
        finally:
            # The zygote holds its own copies now; ours must go so the pipes close when the program ends.
            for fd in handed_over:
                os.close(fd)
        return stdout_read, stderr_read

    def _abandon(self, zygote: ZygoteProcess, collector: OutputCollector, elapsed: float) -> ExecutionResult:
        """The zygote missed the deadline (stopped or starved): kill the whole sandbox; the next run starts anew."""
        logger.warning("sandbox zygote missed the wall-time deadline; killed it (%s)", self._discard(zygote))
        collector.pump(time.monotonic() + DRAIN_S)
        return ExecutionResult(
            exit_code=None,
            signal=int(signal.SIGKILL),
            stdout=collector.stdout.text(),
            stderr=collector.stderr.text(),
            stdout_truncated=collector.stdout.truncated,
            stderr_truncated=collector.stderr.truncated,
            cost_s=elapsed,
            limit_hit=LimitHit.WALL_TIME,
            exception_type=None,
        )

    def _discard(self, zygote: ZygoteProcess) -> str:
        self._forget(zygote)
        return zygote.kill()


def check_limits(limits: Limits) -> None:
    for name, value in vars(limits).items():
        if not value > 0:
            raise ValueError(f"Limits.{name} must be positive, got {value!r}")


def read_only_memfd(name: str, data: bytes) -> int:
    """An in-memory file holding `data`, opened read-only, so the program can neither block on it nor change it."""
    writable = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        write_all(writable, data)
        return os.open(f"/proc/self/fd/{writable}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(writable)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def to_result(reply: dict, collector: OutputCollector, limits: Limits) -> ExecutionResult:
    report = reply["report"] or {}
    if "setup_error" in report:
        raise SandboxError(f"the sandbox failed to prepare the program: {report['setup_error']}")
    return ExecutionResult(
        exit_code=reply["exit_code"],
        signal=reply["signal"],
        stdout=collector.stdout.text(),
        stderr=collector.stderr.text(),
        stdout_truncated=collector.stdout.truncated,
        stderr_truncated=collector.stderr.truncated,
        cost_s=reply["cost_s"],
        limit_hit=limit_hit(reply, report, collector, limits),
        exception_type=report.get("type"),
        exception_line=report.get("line"),
        exception_message=report.get("message"),
    )


def limit_hit(reply: dict, report: dict, collector: OutputCollector, limits: Limits) -> LimitHit | None:
    """Which limit ended (or trimmed) the run, from what the zygote measured plus the program's exception."""
    if reply["timed_out"]:
        return LimitHit.WALL_TIME
    # The zygote rounds the CPU limit up to whole seconds (RLIMIT_CPU's unit); SIGKILL comes 1 s after SIGXCPU.
    cpu_limit_s = max(1, math.ceil(limits.cpu_time_s))
    if reply["signal"] == signal.SIGXCPU or (
        reply["signal"] == signal.SIGKILL and reply["cpu_s"] >= cpu_limit_s - 0.05
    ):
        return LimitHit.CPU_TIME
    if report.get("memory_error"):
        return LimitHit.MEMORY
    if report.get("errno") == errno.EFBIG:
        return LimitHit.FILE_SIZE
    # fork() fails with EAGAIN once RLIMIT_NPROC is reached; the stray count tells it from other EAGAINs. The cap
    # also counts the zygote, the program itself and forks in flight when the program gave up, hence the slack.
    if report.get("errno") == errno.EAGAIN and reply["strays"] + PROCESS_SLACK >= limits.max_processes:
        return LimitHit.PROCESSES
    if collector.stdout.truncated or collector.stderr.truncated:
        return LimitHit.OUTPUT
    return None
