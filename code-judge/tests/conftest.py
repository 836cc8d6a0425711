"""Shared fixtures: a real sandbox; for the service tests, a real redis-server and `code-judge` processes (see
judge_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from judge_harness import Launcher, RedisProcess

from code_judge.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def sandbox_config() -> SandboxConfig:
    """The configuration of `sandbox`; a test module overrides this fixture to test another one."""
    return SandboxConfig()


@pytest.fixture(scope="module")
def sandbox(sandbox_config: SandboxConfig) -> Iterator[Sandbox]:
    """One real bubblewrap sandbox for a whole test module (its zygotes start once)."""
    with Sandbox(sandbox_config) as box:
        yield box


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
