"""One zygote process: start it, hand it a request with its descriptors, read its reply, kill it."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import socket
import subprocess
import tempfile
import time

from .config import SandboxConfig
from .errors import SandboxCrashed, SandboxUnavailable
from .launcher import launch_spec, start_process
from .priority import descendants
from .zygote import MAX_REPORT_BYTES, REPLY, REQUEST

logger = logging.getLogger(__name__)
MAX_REPLY_BYTES = REPLY.size + MAX_REPORT_BYTES
STDERR_TAIL_BYTES = 4000
CLOSE_TIMEOUT_S = 5.0


class ZygoteProcess:
    def __init__(self, config: SandboxConfig):
        self.config = config
        self._ending: str | None = None  # how it ended, once killed
        self.sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # A file, not a pipe: nobody reads the zygote's stderr until it dies, so it must never block it.
        self.stderr = tempfile.TemporaryFile()
        try:
            self.process = start_process(
                launch_spec(config, control_fd=child_sock.fileno()),
                stdout=subprocess.DEVNULL,
                stderr=self.stderr,
                pass_fds=(child_sock.fileno(),),
                # Its own process group, so kill() also reaches what an insecure-mode program left behind.
                start_new_session=True,
            )
        except SandboxUnavailable:
            self.sock.close()
            self.stderr.close()
            raise
        finally:
            child_sock.close()
        try:
            message = self._receive(time.monotonic() + config.startup_timeout_s)
        except SandboxCrashed as error:
            raise SandboxUnavailable(f"the {config.mode} sandbox failed to start: {error}") from error
        if message is None:
            raise SandboxUnavailable(
                f"the {config.mode} sandbox did not start within {config.startup_timeout_s} s ({self.kill()})"
            )
        ready = json.loads(message)
        self.base_vm_bytes: int = ready["base_vm_bytes"]
        self.packages: frozenset[str] = frozenset(ready["packages"])
        # The zygote's own pid on the host: bwrap's only child, or the process we started in insecure mode.
        inner = [self.process.pid] if config.mode == "insecure" else descendants(self.process.pid)
        if not inner:
            raise SandboxUnavailable(f"the {config.mode} sandbox exited right after starting ({self.kill()})")
        self.zygote_pid = inner[0]
        logger.info(
            "sandbox zygote %d up (%s mode, preloads %s, python %s, %d MiB mapped before any program, "
            "%d MiB in huge pages)",
            self.process.pid,
            config.mode,
            ",".join(config.preload) or "none",
            ready["python"],
            ready["base_vm_bytes"] >> 20,
            ready["huge_bytes"] >> 20,
        )

    def send(
        self,
        fds: list[int],
        wall_time_s: float,
        cpu_time_s: float,
        address_space_bytes: int,
        max_processes: int,
        max_file_size_bytes: int,
    ) -> None:
        """Hand the zygote one program: its descriptors (source, stdin, stdout, stderr) and limits."""
        request = REQUEST.pack(wall_time_s, cpu_time_s, address_space_bytes, max_processes, max_file_size_bytes)
        try:
            socket.send_fds(self.sock, [request], fds)
        except OSError as error:
            raise SandboxCrashed(f"the sandbox zygote is gone: {self.kill()}") from error

    def receive(self, deadline: float) -> dict | None:
        """The zygote's reply to a run, or None when the deadline passed; SandboxCrashed when it is gone."""
        message = self._receive(deadline)
        return None if message is None else decode_reply(message)

    def _receive(self, deadline: float) -> bytes | None:
        self.sock.settimeout(max(0.0, deadline - time.monotonic()))
        try:
            message = self.sock.recv(MAX_REPLY_BYTES)
        except (TimeoutError, BlockingIOError):
            # BlockingIOError: the deadline had already passed, so the socket was polled without waiting.
            return None
        except ConnectionError as error:
            raise SandboxCrashed(f"the sandbox zygote is gone: {self.kill()}") from error
        if not message:
            raise SandboxCrashed(f"the sandbox zygote is gone: {self.kill()}")
        return message

    def fileno(self) -> int:
        return self.sock.fileno()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Ask the zygote to exit (it leaves when its control socket closes), then make sure it did."""
        self.sock.close()
        try:
            self.process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            logger.warning("sandbox zygote %d ignored close; killing it", self.process.pid)
        self.kill()

    def kill(self) -> str:
        """Kill the whole sandbox (its pid namespace dies with it) and describe how the zygote ended."""
        if self._ending is not None:
            return self._ending
        if self.process.poll() is None:
            if self.config.mode == "insecure":
                # No pid namespace to take everything down: a run in its own session is outside our process
                # group, so its processes are killed one by one.
                for pid in descendants(self.process.pid):
                    kill_quietly(pid)
            os.killpg(self.process.pid, signal.SIGKILL)
        returncode = self.process.wait()
        self.sock.close()
        self.stderr.seek(0, 2)
        self.stderr.seek(max(0, self.stderr.tell() - STDERR_TAIL_BYTES))
        tail = self.stderr.read().decode(errors="replace").strip()
        self.stderr.close()
        self._ending = f"zygote exited with {returncode}" + (f": {tail}" if tail else "")
        return self._ending


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def decode_reply(message: bytes) -> dict:
    retire, exit_code, signal_number, cost_s, cpu_s, total_cpu_s, cpu_wait_s, timed_out, strays = REPLY.unpack_from(
        message
    )
    try:
        # Written by the program's own process: anything that is not a JSON object counts as no report.
        report = json.loads(message[REPLY.size :]) if len(message) > REPLY.size else None
    except (ValueError, RecursionError):
        report = None
    return {
        "retire": retire,
        "exit_code": None if exit_code < 0 else exit_code,
        "signal": signal_number or None,
        "cost_s": cost_s,
        "cpu_s": cpu_s,
        "total_cpu_s": total_cpu_s,
        "cpu_wait_s": None if math.isnan(cpu_wait_s) else cpu_wait_s,
        "timed_out": timed_out,
        "strays": strays,
        "report": report if isinstance(report, dict) else None,
    }
