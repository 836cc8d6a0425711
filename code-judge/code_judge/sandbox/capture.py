"""Read a program's stdout and stderr while it runs, keeping at most a cap and discarding the rest."""

from __future__ import annotations

import fcntl
import os
import selectors
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
        self.selector = selectors.DefaultSelector()
        self.open_streams = 2
        for stream in (self.stdout, self.stderr):
            os.set_blocking(stream.fd, False)
            self.selector.register(stream.fd, selectors.EVENT_READ, stream)

    def pump(self, deadline: float, stop_fd: int | None = None) -> bool:
        """Read until both pipes close, `stop_fd` is readable, or the deadline; True if the pipes closed."""
        if stop_fd is not None:
            self.selector.register(stop_fd, selectors.EVENT_READ, None)
        try:
            while self.open_streams:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                for key, _ in self.selector.select(remaining):
                    if key.data is None:
                        return False
                    self.read(key.data)
            return True
        finally:
            if stop_fd is not None:
                self.selector.unregister(stop_fd)

    def read(self, stream: CappedStream) -> None:
        try:
            chunk = os.read(stream.fd, CHUNK_BYTES)
        except BlockingIOError:
            return
        if chunk:
            stream.absorb(chunk)
            return
        self.selector.unregister(stream.fd)
        os.close(stream.fd)
        stream.fd = -1
        self.open_streams -= 1

    def close(self) -> None:
        for stream in (self.stdout, self.stderr):
            if stream.fd >= 0:
                self.selector.unregister(stream.fd)
                os.close(stream.fd)
                stream.fd = -1
        self.selector.close()
