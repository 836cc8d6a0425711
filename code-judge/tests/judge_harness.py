"""Real processes for the service tests: redis-server on loopback, and `code-judge` commands as subprocesses."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from code_judge.local import answers_ping, free_port

START_TIMEOUT_S = 60.0
# How late a stop at a time limit may come on a loaded shared machine (several test sessions on 2 cores). Tests of a
# limit bound it from below by the limit and from above by the limit plus this: far below the 100 s their programs
# would otherwise run, so a run that waits for its program instead of stopping it still fails.
SCHEDULING_SLACK_S = 10.0


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


async def wait_until_async(predicate, timeout_s: float, what: str, interval_s: float = 0.01) -> None:
    """`wait_until` for an awaitable predicate, polled on the running event loop."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)


class RedisProcess:
    """A redis-server on a fixed loopback port that a test can kill and start again (data is lost, as in prod)."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            shutil.which("redis-server") or "redis-server",
            "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.workdir),
            "--save", "", "--appendonly", "no", "--daemonize", "no",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.ping, 10, "redis-server to answer PING")

    def ping(self) -> bool:
        try:
            with redis.Redis(port=self.port, socket_timeout=0.5) as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.uri, socket_timeout=5)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)


def service_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URI"}
    # numpy/sympy preloads cost seconds per worker start on a busy 2-core box; these tests do not need them.
    env.update(PRELOAD_MODULES="math", MAX_EXECUTION_TIME="3")
    env.update(overrides)
    return env


@dataclass
class Service:
    """A `code-judge` command running as a subprocess; stopped with SIGTERM (and reaped) at teardown."""

    args: list[str]
    env: dict[str, str]
    log_path: Path
    url: str | None = None
    process: subprocess.Popen[bytes] = field(init=False)

    def start(self) -> Service:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "code_judge.cli", *self.args], stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_http(self) -> Service:
        def up() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"code-judge exited with {self.process.returncode}:\n{self.log()}")
            return answers_ping(self.url)

        wait_until(up, START_TIMEOUT_S, f"/ping of {self.args}", 0.1)
        return self

    def wait_workers(self, count: int) -> Service:
        assert self.url is not None
        wait_until(lambda: self.status()["num_workers"] >= count, START_TIMEOUT_S, f"{count} live workers", 0.1)
        return self

    def status(self) -> dict:
        return httpx.get(f"{self.url}/status", timeout=5).json()

    def stop(self, timeout_s: float = 20) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise
        return self.process.returncode


class Launcher:
    """launch(*args, http=True, **env) starts `code-judge <args>`; stop_all() stops them, newest first."""

    def __init__(self, log_dir: Path):
        self._log_dir = log_dir
        self._started: list[Service] = []

    def __call__(self, *args: str, http: bool = True, **env: str) -> Service:
        service = Service(list(args), service_env(**env), self._log_dir / f"service{len(self._started)}.log")
        if http:
            port = free_port()
            service.args += ["--host", "127.0.0.1", "--port", str(port)]
            service.url = f"http://127.0.0.1:{port}"
        self._started.append(service.start())
        return service

    def stop_all(self) -> None:
        for service in reversed(self._started):
            service.stop()


def worker_pids(parent_pid: int) -> list[int]:
    """PIDs of the worker processes (multiprocessing spawn children) of a `code-judge serve|worker` process."""
    pids = []
    for child in Path(f"/proc/{parent_pid}/task/{parent_pid}/children").read_text().split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        if b"spawn_main" in cmdline:
            pids.append(int(child))
    return pids
