"""Read a program's stdout and stderr while it runs, keeping at most a cap and discarding the rest."""

from __future__ import annotations

import fcntl
import math
import os
import select
import time
from dataclasses import dataclass, field

CHUNK_BYTES = 1 << 16
PIPE_BYTES = 1 << 20  # bigger pipes mean fewer wake-ups when a program prints a lot


@dataclass
class CappedStream:
    fd: int
    cap: int
    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    def absorb(self, chunk: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.total += len(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


def output_pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        # Unprivileged callers are capped by /proc/sys/fs/pipe-max-size; the default size still works.
        pass
    return read_end, write_end


class OutputCollector:
    """Multiplexes the two output pipes with the zygote's control socket until both pipes are closed."""

    def __init__(self, stdout_fd: int, stderr_fd: int, cap: int):
        self.stdout = CappedStream(stdout_fd, cap)
        self.stderr = CappedStream(stderr_fd, cap)
        self.streams = {stdout_fd: self.stdout, stderr_fd: self.stderr}
        # A plain poll object, not `selectors`: this runs for every program and costs no descriptor of its own.
        self.poller = select.poll()
        for fd in self.streams:
            os.set_blocking(fd, False)
            self.poller.register(fd, select.POLLIN)

    def pump(self, deadline: float, stop_fd: int | None = None) -> bool:
        """Read until both pipes close, `stop_fd` is readable, or the deadline; True if the pipes closed."""
        if stop_fd is not None:
            self.poller.register(stop_fd, select.POLLIN)
        try:
            while self.streams:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for fd, _ in self.poller.poll(math.ceil(remaining * 1000)):
                    if fd == stop_fd:
                        return False
                    self.read(self.streams[fd])
            return True
        finally:
            if stop_fd is not None:
                self.poller.unregister(stop_fd)

    def read(self, stream: CappedStream) -> None:
        try:
            chunk = os.read(stream.fd, CHUNK_BYTES)
        except BlockingIOError:
            return
        if chunk:
            stream.absorb(chunk)
            return
        self.close_stream(stream)

    def close_stream(self, stream: CappedStream) -> None:
        self.poller.unregister(stream.fd)
        del self.streams[stream.fd]
        os.close(stream.fd)
        stream.fd = -1

    def close(self) -> None:
        for stream in list(self.streams.values()):
            self.close_stream(stream)
