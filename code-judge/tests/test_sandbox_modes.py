"""Refusing to start without isolation, and the explicit insecure mode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from code_judge.execution import Limits
from code_judge.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, check_sandbox_support

LIMITS = Limits(wall_time_s=5, cpu_time_s=5)


def test_support_check_passes_where_bubblewrap_works():
    check_sandbox_support(SandboxConfig())


def test_missing_bubblewrap_is_explained_and_names_the_insecure_flag(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed.*mode='insecure'"):
        check_sandbox_support(SandboxConfig())
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
        Sandbox(SandboxConfig())


NO_USER_NAMESPACES = """
import sys
from code_judge.execution import Limits
from code_judge.sandbox import Sandbox, SandboxConfig, SandboxUnavailable, check_sandbox_support
config = SandboxConfig(uid=0, warm_up=False)  # uid 0 is the only uid mapped in this user namespace
try:
    check_sandbox_support(config)
except SandboxUnavailable as error:
    print("check:", error)
try:
    Sandbox(config)
except SandboxUnavailable as error:
    print("start:", error)
with Sandbox(SandboxConfig(mode="insecure", uid=0, warm_up=False)) as box:
    print("insecure:", box.run("print(6 * 7)", "", Limits()).stdout.strip())
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_where_user_namespaces_are_refused_the_sandbox_says_why_and_only_insecure_mode_runs():
    # A user namespace whose own limit forbids nested user namespaces: what bwrap meets on such hosts.
    script = f"echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c '{NO_USER_NAMESPACES}'"
    completed = subprocess.run(
        ["unshare", "--user", "--map-root-user", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    lines = completed.stdout.splitlines()
    assert completed.returncode == 0, completed.stderr
    assert lines[0].startswith("check: bwrap sandbox cannot run") and "namespace" in lines[0]
    assert "mode='insecure'" in lines[0]
    assert lines[1].startswith("start: the bwrap sandbox failed to start") and "namespace" in lines[1]
    assert lines[2] == "insecure: 42"


def test_missing_interpreter_or_preload_is_explained():
    with pytest.raises(SandboxUnavailable, match="/nonexistent/python3 is missing"):
        check_sandbox_support(SandboxConfig(python="/nonexistent/python3"))
    with pytest.raises(SandboxUnavailable, match="No module named 'no_such_module_xyz'"):
        check_sandbox_support(SandboxConfig(preload=("no_such_module_xyz",)))
    with pytest.raises(SandboxUnavailable, match="No module named 'no_such_module_xyz'"):
        Sandbox(SandboxConfig(preload=("no_such_module_xyz",)))


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="sandbox mode must be one of"):
        SandboxConfig(mode="docker")


def test_insecure_mode_runs_programs_and_still_kills_what_they_leave_behind():
    with Sandbox(SandboxConfig(mode="insecure", warm_up=False)) as box:
        assert box.mode == "insecure"
        result = box.run(
            textwrap.dedent(
                """
                import os, subprocess
                daemon = subprocess.Popen(["sleep", "100"], start_new_session=True, stdout=subprocess.DEVNULL)
                print(daemon.pid, sorted(os.environ))
                """
            ),
            "",
            LIMITS,
        )
        daemon_pid, environment = result.stdout.split(" ", 1)
        assert "REDIS_URI" not in environment and "PATH" in environment
        # Killed and reaped before the verdict was returned, not some time later.
        assert not os.path.exists(f"/proc/{daemon_pid}")
        assert box.run("print(1 + 1)", "", LIMITS).stdout == "2\n"
