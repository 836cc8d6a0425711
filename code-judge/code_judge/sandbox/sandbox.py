"""The supervisor side: one Sandbox per worker process, running one program at a time in a warm zygote."""

from __future__ import annotations

import errno
import logging
import math
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace

from ..execution import ExecutionResult, LimitHit, Limits
from .capture import OutputCollector, output_pipe
from .config import SandboxConfig
from .errors import SandboxCrashed, SandboxError
from .priority import can_restore_priority, run_cpu_seconds, set_run_priority
from .process import ZygoteProcess
from .routing import Router

logger = logging.getLogger(__name__)
# After the zygote has killed every process of a run, its output pipes close at once; this only bounds a bug.
DRAIN_S = 2.0
DEMOTE_SWEEP_S = 0.25  # how often a long run's CPU use is checked, and its new processes lowered too
STARTER_THREADS = 4  # zygotes starting at once (a burst of overlapping runs)
RESTORE_LEAD_S = 0.25  # a lowered run gets its priority back this long before its wall-clock cap
PROCESS_SLACK = 4
HEAVY, LIGHT = "heavy", "light"


class Sandbox:
    """Warm zygotes that run one program each at a time; several threads may run programs at once.

    There are two flavours: one with every preload, plus a light one without the heavy modules when `preload`
    has any. Each program runs in the light flavour unless its source names a module only the heavy one has
    loaded. `config.warm_zygotes` zygotes of the flavour that runs plain programs and one of the other start with
    the sandbox; more start when runs overlap, and every idle zygote is kept for the next run of its flavour.
    """

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.mode = config.mode
        self._configs = {HEAVY: config}
        if config.light_preload is not None:
            self._configs[LIGHT] = replace(config, preload=config.light_preload)
        self._lock = threading.Lock()
        # bwrap dies with the *thread* that started it (--die-with-parent is a parent-death signal, which Linux
        # ties to the creating thread), so zygotes are started by threads that live as long as the sandbox.
        self._starter = ThreadPoolExecutor(STARTER_THREADS, thread_name_prefix="zygote-starter")
        self._idle: dict[str, list[ZygoteProcess]] = {flavour: [] for flavour in self._configs}
        self._running: set[ZygoteProcess] = set()
        self._closed = False
        self._demoted_nice = config.demoted_nice if config.demoted_nice and can_restore_priority() else 0
        if config.demoted_nice and not self._demoted_nice:
            logger.warning(
                "long runs keep the default CPU priority: lowering them needs CAP_SYS_NICE and CAP_SYS_ADMIN"
            )
        # Every run gets the same address-space limit, whichever zygote runs it: its memory budget on top of what
        # the largest zygote maps. So a program the router sends to the light zygote fits exactly when it would
        # fit in the heavy one, even if it imports the heavy modules itself.
        self._base_vm_bytes = 0
        plain = LIGHT if LIGHT in self._configs else HEAVY  # the flavour of programs that name no heavy module
        packages: dict[str, frozenset[str]] = {}
        # Started side by side: on a loaded machine a zygote's start-up is mostly waiting for a CPU.
        starting = [
            (flavour, self._starter.submit(ZygoteProcess, self._configs[flavour]))
            for flavour in self._configs
            for _ in range(config.warm_zygotes if flavour == plain else 1)
        ]
        try:
            for flavour, future in starting:
                zygote = future.result()
                self._idle[flavour].append(zygote)
                packages[flavour] = zygote.packages
                self._base_vm_bytes = max(self._base_vm_bytes, zygote.base_vm_bytes)
        except BaseException:
            wait([future for _, future in starting])
            for flavour, future in starting:  # those that did start are closed with the rest
                if future.exception() is None and future.result() not in self._idle[flavour]:
                    self._idle[flavour].append(future.result())
            self.close()
            raise
        self._router = Router(packages[HEAVY] - packages[LIGHT] if LIGHT in packages else ())

    def run(
        self, source: str, stdin: str, limits: Limits, on_long: Callable[[], object] | None = None
    ) -> ExecutionResult:
        """Run one program. Any program gives a result; only the sandbox's own failures raise SandboxError.

        `on_long` is called (once, from this thread) when the run has gone on for `config.demote_after_s`.
        """
        check_limits(limits)
        flavour = HEAVY if LIGHT not in self._configs or self._router.needs_heavy(source) else LIGHT
        zygote = self._acquire(flavour)
        try:
            try:
                pipes = self._start(zygote, source, stdin, limits)
            except SandboxCrashed as error:
                # It died before taking the program (e.g. killed while idle): nothing ran, so run it in a new one.
                logger.warning("%s; starting a new zygote", error)
                self._release(zygote)
                zygote = self._acquire(flavour)
                pipes = self._start(zygote, source, stdin, limits)
            return self._supervise(zygote, pipes, limits, on_long)
        except BaseException:
            # The zygote's state is unknown after a failure of our own: never hand it another program.
            zygote.kill()
            raise
        finally:
            self._release(zygote)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [zygote for zygotes in self._idle.values() for zygote in zygotes]
            for zygotes in self._idle.values():
                zygotes.clear()
        for zygote in idle:
            zygote.close()
        self._stop_starter_when_unused()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _new_zygote(self, flavour: str) -> ZygoteProcess:
        zygote = self._starter.submit(ZygoteProcess, self._configs[flavour]).result()
        with self._lock:
            self._base_vm_bytes = max(self._base_vm_bytes, zygote.base_vm_bytes)
        return zygote

    def _acquire(self, flavour: str) -> ZygoteProcess:
        """An idle live zygote of this flavour, or a new one; the caller owns it until _release."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox is closed")
            idle = self._idle[flavour]
            while idle:
                zygote = idle.pop()  # the most recently used: its pages are the likeliest to be cached
                if zygote.alive():
                    self._running.add(zygote)
                    return zygote
                logger.warning("sandbox zygote died between runs (%s); starting a new one", zygote.kill())
        # Outside the lock: start-up takes a while, and other threads' runs need not wait for it.
        zygote = self._new_zygote(flavour)
        with self._lock:
            self._running.add(zygote)
        return zygote

    def _release(self, zygote: ZygoteProcess) -> None:
        """Keep a zygote that is still fit to run programs; one that died, retired or was killed is dropped."""
        with self._lock:
            self._running.discard(zygote)
            if zygote.alive() and not self._closed:
                self._idle[self._flavour_of(zygote)].append(zygote)
                return
        if zygote.alive():
            zygote.close()
        self._stop_starter_when_unused()

    def _stop_starter_when_unused(self) -> None:
        # Zygotes still running a program would die with their starter thread, so it waits for the last one.
        with self._lock:
            unused = self._closed and not self._running
        if unused:
            self._starter.shutdown()

    def _flavour_of(self, zygote: ZygoteProcess) -> str:
        return next(flavour for flavour, config in self._configs.items() if config is zygote.config)

    def _supervise(
        self,
        zygote: ZygoteProcess,
        pipes: tuple[int, int],
        limits: Limits,
        on_long: Callable[[], object] | None,
    ) -> ExecutionResult:
        collector = OutputCollector(*pipes, cap=limits.max_output_bytes)
        try:
            started = time.monotonic()
            deadline = started + limits.wall_time_s + self.config.backstop_s
            self._wait_for_reply(zygote, collector, started, limits.wall_time_s, on_long)
            try:
                reply = zygote.receive(deadline)
            except SandboxCrashed as error:
                raise SandboxCrashed(f"the sandbox zygote died during a run: {error}") from error
            if reply is None:
                return self._abandon(zygote, collector, time.monotonic() - started)
            if not collector.pump(time.monotonic() + DRAIN_S):
                logger.warning("output pipes of a finished run stayed open; killed its zygote (%s)", zygote.kill())
                raise SandboxError("output pipes stayed open after every process of the run was killed")
            if reply["retire"]:
                logger.warning("sandbox zygote could not clean up after a run; replacing it")
                zygote.close()
            return to_result(reply, collector, limits, self.config.starved_cpu_share)
        finally:
            collector.close()

    def _wait_for_reply(
        self,
        zygote: ZygoteProcess,
        collector: OutputCollector,
        started: float,
        wall_time_s: float,
        on_long: Callable[[], object] | None,
    ) -> None:
        """Read the program's output until the zygote replies or the deadline passes.

        After `demote_after_s` the run is long and `on_long` is called once. From then on, when lowering is
        enabled, a long run that has used `demote_cpu_s` of CPU drops to `demoted_nice` (re-applied every
        DEMOTE_SWEEP_S, for the processes it starts later) until RESTORE_LEAD_S before its wall-clock cap, when
        it gets the default priority back (see priority.py).
        """
        deadline = started + wall_time_s + self.config.backstop_s
        restore_at = started + wall_time_s - RESTORE_LEAD_S
        check_at, is_long, lowered = started + self.config.demote_after_s, False, False
        while True:
            until = min(check_at, deadline)
            collector.pump(until, stop_fd=zygote.fileno())
            # Also covers a program that closed both pipes early: then only the zygote's socket is left to wait on.
            if readable(zygote.fileno(), until - time.monotonic()) or time.monotonic() >= deadline:
                return
            if not is_long and on_long is not None:
                on_long()
            is_long, check_at = True, deadline
            if self._demoted_nice and time.monotonic() < restore_at:
                if lowered or run_cpu_seconds(zygote.zygote_pid) >= self.config.demote_cpu_s:
                    set_run_priority(zygote.zygote_pid, self._demoted_nice)
                    lowered = True
                check_at = min(time.monotonic() + DEMOTE_SWEEP_S, restore_at)
            elif lowered:
                set_run_priority(zygote.zygote_pid, 0)
                lowered = False

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
        try:
            zygote.send(
                handed_over,
                wall_time_s=limits.wall_time_s,
                cpu_time_s=limits.cpu_time_s,
                address_space_bytes=self._base_vm_bytes + limits.memory_bytes,
                max_processes=limits.max_processes,
                max_file_size_bytes=limits.max_file_size_bytes,
            )
        except SandboxCrashed:
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
        logger.warning("sandbox zygote missed the wall-time deadline; killed it (%s)", zygote.kill())
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


def readable(fd: int, timeout_s: float) -> bool:
    return bool(select.select([fd], [], [], max(0.0, timeout_s))[0])


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


def to_result(reply: dict, collector: OutputCollector, limits: Limits, starved_cpu_share: float) -> ExecutionResult:
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
        cpu_s=reply["total_cpu_s"],
        starved=starved(reply, starved_cpu_share),
    )


def starved(reply: dict, cpu_share: float) -> bool:
    """Stopped by the wall-clock cap after waiting for a CPU at least half the time and getting less than `cpu_share`.

    A sleeping or blocked program does not wait for a CPU, so it is never starved: the cap stopped it fairly.
    """
    wait_s = reply["cpu_wait_s"]
    return (
        reply["timed_out"]
        and wait_s is not None
        and wait_s >= reply["cost_s"] / 2
        and reply["total_cpu_s"] < cpu_share * reply["cost_s"]
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
