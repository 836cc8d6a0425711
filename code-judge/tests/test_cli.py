"""The `code-judge` command's refusals and its explicit insecure mode."""

from __future__ import annotations

import subprocess
import sys

from judge_harness import service_env


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "code_judge.cli", *args],
        env=service_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_workers_refuse_to_start_without_a_working_sandbox():
    done = run_cli("worker", "--redis-uri", "redis://127.0.0.1:1/0", PYTHON_EXECUTOR_PATH="/nonexistent/python3")
    assert done.returncode == 2
    assert "sandbox cannot run here" in done.stderr and "--insecure" in done.stderr


def test_bad_settings_are_named():
    done = run_cli("worker", "--redis-uri", "redis://127.0.0.1:1/0", MAX_EXECUTION_TIME="soon")
    assert done.returncode == 2 and "MAX_EXECUTION_TIME='soon'" in done.stderr


def test_api_and_worker_need_a_redis_uri():
    for command in ("api", "worker"):
        done = run_cli(command)
        assert done.returncode == 2 and "REDIS_URI" in done.stderr


def test_insecure_mode_is_explicit_and_reported(launch):
    service = launch("serve", "--insecure", MAX_WORKERS="1").wait_http().wait_workers(1)
    assert service.status()["sandbox"] == "insecure"
    assert "sandbox DISABLED" in service.log()
