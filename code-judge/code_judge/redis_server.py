"""A private redis-server owned by `code-judge serve` when no REDIS_URI is given.

It listens only on a unix socket in a mode-700 directory (no TCP port at all), keeps nothing on disk, dies with
its parent, and is restarted on the same socket if it exits while the service runs.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from code_judge.process import die_with_parent

logger = logging.getLogger(__name__)

_START_TIMEOUT_S = 10.0


class RedisStartError(RuntimeError):
    pass


class EmbeddedRedis:
    def __init__(self, executable: str = "redis-server"):
        resolved = shutil.which(executable)
        if resolved is None:
            raise RedisStartError(
                f"{executable!r} not found: install it (Debian: apt-get install redis-server) or set REDIS_URI"
            )
        self._executable = resolved
        self._dir = Path(tempfile.mkdtemp(prefix="code-judge-redis-"))  # mkdtemp makes it mode 700
        self._socket = self._dir / "redis.sock"
        self._log = self._dir / "redis.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"unix://{self._socket}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> str:
        command = [
            self._executable,
            "--port", "0",
            "--unixsocket", str(self._socket),
            "--unixsocketperm", "700",
            "--dir", str(self._dir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self._log),
        ]  # fmt: skip
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        self._wait_ready()
        logger.info("embedded redis-server %d on %s", self._process.pid, self._socket)
        return self.uri

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise RedisStartError(f"redis-server exited with {self._process.returncode}: {self._log_tail()}")
            try:
                with redis.Redis(unix_socket_path=str(self._socket), socket_timeout=1.0) as client:
                    if client.ping():
                        return
            except (redis.ConnectionError, redis.TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RedisStartError(f"redis-server not ready after {_START_TIMEOUT_S:g} s: {self._log_tail()}")
            time.sleep(0.05)

    def _log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-2000:] if self._log.exists() else "(no log)"

    def restart_if_dead(self) -> bool:
        """Start it again (same socket) if it exited; True when it did."""
        if self._process is None or self._process.poll() is None:
            return False
        logger.error("embedded redis-server exited with %s; restarting it", self._process.returncode)
        self.start()
        return True

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
