"""Fixtures shared across the suite: the real Qwen3 tokenizer and a real code-judge service."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    from cleaner.qwen_tokenizer import load_qwen3_tokenizer

    return load_qwen3_tokenizer()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def judge_url(tmp_path_factory) -> str:
    """A real `code-judge serve` (embedded redis-server, sandbox on) on a loopback port, for the whole session."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("judge") / "judge.log"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URI"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "code_judge.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"code-judge exited with {proc.returncode}:\n{Path(log_path).read_text()}")
            try:
                if httpx.get(f"{url}/ping", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"code-judge did not answer /ping within 60 s:\n{Path(log_path).read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
