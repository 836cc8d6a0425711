"""Run a private `code-judge serve` on a free loopback port, for tests, benchmarks and the demo.

The service starts its own redis-server (no REDIS_URI is passed on) and is stopped, with everything it
started, when the context exits.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers_ping(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ping", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def local_judge(log_path: Path, workers: int | None = None) -> Iterator[str]:
    """Yield the base URL of a running judge whose output goes to `log_path`; raise with that log if it fails."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "code_judge.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    if workers:
        command += ["--workers", str(workers)]
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URI"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers_ping(url):
            if process.poll() is not None:
                raise RuntimeError(f"code-judge exited with {process.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"code-judge did not answer /ping within {START_TIMEOUT_S:.0f} s:\n{log_path.read_text()}"
                )
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
