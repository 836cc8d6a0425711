"""Fixtures for the service tests: a real redis-server and `code-judge` processes (see judge_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from judge_harness import Launcher, RedisProcess


@pytest.fixture
def redis_process(tmp_path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


@pytest.fixture
def launch(tmp_path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.stop_all()
