"""Each test runs a real attack inside the real bubblewrap sandbox and checks it is contained."""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from judge_harness import SCHEDULING_SLACK_S, wait_until

import code_judge
from code_judge.execution import LimitHit, Limits
from code_judge.sandbox import Sandbox, SandboxConfig, SandboxCrashed

LIMITS = Limits(wall_time_s=5, cpu_time_s=5)
# The restart tests start several zygotes; one zygote with only math preloaded keeps each start-up cheap.
QUICK_START = SandboxConfig(preload=("math",), warm_up=False)


def run(sandbox: Sandbox, source: str, limits: Limits = LIMITS):
    return sandbox.run(textwrap.dedent(source), "", limits)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to the sandbox uid needs a root supervisor")
def test_program_runs_as_the_unprivileged_user(sandbox):
    result = run(
        sandbox,
        """
        import os
        print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
        try:
            open("/etc/shadow").read()
        except PermissionError:
            print("shadow denied")
        """,
    )
    assert result.stdout.split("\n")[:2] == ["65534 65534 65534 []", "shadow denied"]


def test_no_network_not_even_the_hosts_loopback(sandbox):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = run(
            sandbox,
            f"""
            import os, socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2)
                print("connected")
            except OSError as error:
                print(type(error).__name__)
            print([line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]])
            """,
        )
    assert result.stdout == "ConnectionRefusedError\n['lo']\n"


def test_service_files_and_environment_are_invisible(sandbox, monkeypatch):
    monkeypatch.setenv("REDIS_URI", "redis://secret@127.0.0.1:6379")
    judge_source = Path(code_judge.__file__).resolve()
    result = run(
        sandbox,
        f"""
        import os
        for path in [{str(judge_source)!r}, {str(judge_source.parent)!r}, "/root", "/home", "/work"]:
            print(path, os.path.exists(path))
        try:
            open("/proc/1/environ").read()
        except PermissionError:
            print("zygote environ denied")
        print(sorted(k for k in os.environ if "REDIS" in k or "SECRET" in k))
        """,
    )
    lines = result.stdout.splitlines()
    assert [line.rsplit(" ", 1)[1] for line in lines[:5]] == ["False"] * 5
    assert lines[5:] == ["zygote environ denied", "[]"]


def test_system_is_read_only_and_each_run_gets_a_fresh_private_dir(sandbox):
    first = run(
        sandbox,
        """
        import os
        for path in ["/usr/evil", "/etc/evil", "/evil", "/proc/evil"]:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError:
                pass
        open("left-behind.txt", "w").write("x")
        open("/dev/shm/left-behind", "w").write("x")
        os.makedirs("/tmp/locked/inner"); os.chmod("/tmp/locked/inner", 0); os.chmod("/tmp/locked", 0)
        print(os.getcwd())
        """,
    )
    assert first.stdout == "/tmp/run\n"
    second = run(
        sandbox,
        """
        import os
        print(os.listdir("."), os.listdir("/dev/shm"), sorted(os.listdir("/tmp")))
        """,
    )
    assert second.stdout == "['solution.py'] [] ['run']\n"


def test_sysv_ipc_objects_do_not_outlive_the_run(sandbox):
    create = run(
        sandbox,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        IPC_PRIVATE, IPC_CREAT = 0, 0o1000
        ids = [libc.shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0o600), libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600),
               libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)]
        print(min(ids) >= 0)
        """,
    )
    assert create.stdout == "True\n"
    leftovers = run(
        sandbox,
        """
        for kind in ("shm", "sem", "msg"):
            print(kind, len(open(f"/proc/sysvipc/{kind}").readlines()) - 1)
        """,
    )
    assert leftovers.stdout == "shm 0\nsem 0\nmsg 0\n"


@pytest.mark.parametrize(
    "litter",
    [
        # deeper than PATH_MAX, so no path-based clean-up can reach the bottom
        'for _ in range(3000):\n    os.mkdir("d")\n    os.chdir("d")',
        # more entries than the zygote removes before the verdict
        'for i in range(12000):\n    os.close(os.open(f"/dev/shm/{i}", os.O_CREAT | os.O_WRONLY))',
    ],
    ids=["too-deep", "too-many"],
)
def test_a_run_that_leaves_a_mess_gets_a_result_and_the_next_run_a_fresh_sandbox(sandbox, litter):
    messy = sandbox.run(f"import os\n{litter}\nprint('littered')", "", LIMITS)
    assert messy.stdout == "littered\n" and messy.exit_code == 0
    after = run(sandbox, "import os; print(os.listdir('/tmp'), os.listdir('.'), os.listdir('/dev/shm'))")
    assert after.stdout == "['run'] ['solution.py'] []\n"


def test_every_process_of_a_run_is_gone_when_the_verdict_returns(sandbox):
    detached = run(
        sandbox,
        """
        import os, subprocess, time
        subprocess.Popen(["sleep", "100"])                      # plain child
        subprocess.Popen(["sleep", "100"], start_new_session=True)  # own session
        if os.fork() == 0:                                       # classic daemon: double fork, holding stdout
            os.setsid()
            if os.fork() == 0:
                time.sleep(100)
            os._exit(0)
        print("parent done")
        """,
    )
    assert detached.stdout == "parent done\n"
    assert detached.cost_s < 2
    survivors = run(
        sandbox,
        """
        import os
        print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()))
        """,
    )
    assert survivors.stdout == "[1]\n"


def test_program_cannot_kill_trace_or_inspect_the_zygote(sandbox):
    result = run(
        sandbox,
        """
        import os, signal
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGINT):
            os.kill(os.getppid(), sig)
            os.kill(1, sig)
        for path in ("/proc/1/mem", "/proc/1/fd"):
            try:
                os.listdir(path) if path.endswith("fd") else open(path, "rb").read(1)
            except PermissionError:
                print("denied", path)
        try:
            os.kill(-1, signal.SIGKILL)  # every process we may signal, except ourselves
        except ProcessLookupError:
            print("nobody to kill")
        """,
    )
    assert result.stdout == "denied /proc/1/mem\ndenied /proc/1/fd\nnobody to kill\n"
    assert result.exit_code == 0
    assert run(sandbox, "print('still serving')").stdout == "still serving\n"


@pytest.fixture
def quick_sandbox() -> Iterator[tuple[Sandbox, int]]:
    """A sandbox with one zygote, cheap to start, and the pid of the bwrap process that holds its zygote."""
    before = set(own_children())
    with Sandbox(QUICK_START) as box:
        (bwrap_pid,) = set(own_children()) - before
        assert Path(f"/proc/{bwrap_pid}/comm").read_text().strip() == "bwrap"
        yield box, bwrap_pid


def signal_once_running(zygote_pid: int, pid: int, signum: int) -> threading.Thread:
    """A thread that sends `signum` to `pid` once the zygote has forked the run's process (a run is under way)."""

    def send() -> None:
        wait_until(lambda: children_of(zygote_pid), 30, "the zygote to start the run", 0.01)
        os.kill(pid, signum)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def test_zygote_killed_from_outside_mid_run_is_reported_and_replaced(quick_sandbox):
    box, bwrap_pid = quick_sandbox
    (zygote_pid,) = children_of(bwrap_pid)
    killer = signal_once_running(zygote_pid, bwrap_pid, signal.SIGKILL)
    with pytest.raises(SandboxCrashed, match="died during a run"):
        box.run("import time; time.sleep(100)", "", LIMITS)
    killer.join()
    assert box.run("print('fresh zygote')", "", LIMITS).stdout == "fresh zygote\n"


def test_zygote_killed_while_idle_is_replaced_without_losing_the_next_run(quick_sandbox):
    box, bwrap_pid = quick_sandbox
    (zygote_pid,) = children_of(bwrap_pid)
    os.kill(zygote_pid, signal.SIGKILL)
    # bwrap (our child) exits once its zygote is gone: wait for that without reaping it, which is the sandbox's job.
    os.waitid(os.P_PID, bwrap_pid, os.WEXITED | os.WNOWAIT)
    assert box.run("print('ran anyway')", "", LIMITS).stdout == "ran anyway\n"


def test_heavy_zygote_killed_while_idle_is_replaced_and_the_light_one_keeps_serving():
    before = set(own_children())
    with Sandbox(SandboxConfig(warm_up=False)) as box:
        # The zygote's configuration is the last argument of its bwrap command line.
        preloads = {pid: json.loads(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[-2])["preload"]
                    for pid in set(own_children()) - before}  # fmt: skip
        assert sorted(preloads.values()) == [["math"], ["math", "numpy", "sympy"]]
        (heavy_bwrap,) = [pid for pid, preload in preloads.items() if "sympy" in preload]
        os.kill(heavy_bwrap, signal.SIGKILL)
        assert box.run("print('light')", "", LIMITS).stdout == "light\n"
        assert box.run("import sympy; print(sympy.factorint(12))", "", LIMITS).stdout == "{2: 2, 3: 1}\n"


def test_frozen_zygote_is_abandoned_at_the_wall_limit_and_replaced(quick_sandbox):
    box, bwrap_pid = quick_sandbox
    (zygote_pid,) = children_of(bwrap_pid)
    freezer = signal_once_running(zygote_pid, zygote_pid, signal.SIGSTOP)
    started = time.monotonic()
    result = box.run("import time; time.sleep(100)", "", Limits(wall_time_s=1.0))
    elapsed = time.monotonic() - started
    freezer.join()
    assert result.limit_hit is LimitHit.WALL_TIME
    assert 1.0 <= elapsed < 1.0 + box.config.backstop_s + SCHEDULING_SLACK_S
    assert box.run("print('fresh zygote')", "", LIMITS).stdout == "fresh zygote\n"


def own_children() -> list[int]:
    return children_of(os.getpid())


def children_of(pid: int) -> list[int]:
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            children += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except FileNotFoundError:
            pass  # a thread that ended after the listing
    return children
