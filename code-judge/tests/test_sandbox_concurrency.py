"""One Sandbox serving several threads at once, and the CPU priority of runs that go on for long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from judge_harness import wait_until

from code_judge.execution import LimitHit, Limits
from code_judge.sandbox import Sandbox, SandboxConfig
from code_judge.sandbox.priority import can_restore_priority, descendants, run_cpu_seconds, set_run_priority


@pytest.fixture(scope="module")
def sandbox_config() -> SandboxConfig:
    return SandboxConfig(preload=("math",), warm_up=False, demote_after_s=0.5, demote_cpu_s=0.05, demoted_nice=19)


def test_runs_from_several_threads_overlap_in_separate_zygotes(sandbox):
    source = "import time\nprint('started', flush=True)\ntime.sleep(100)"
    with ThreadPoolExecutor(6) as pool:
        answers = [pool.submit(sandbox.run, source, "", Limits(wall_time_s=100)) for _ in range(6)]
        # All six running at once, each the child of its own zygote; then stopped from outside.
        wait_until(lambda: len(running_runs()) == 6, 60, "six runs to be running at the same time")
        runs = running_runs()
        assert len({_parent(pid) for pid in runs}) == 6
        for pid in runs:
            os.kill(pid, signal.SIGKILL)
        results = [answer.result(timeout=60) for answer in answers]
    assert [(result.stdout, result.signal) for result in results] == [("started\n", signal.SIGKILL)] * 6


@pytest.mark.skipif(not can_restore_priority(), reason="lowering long runs needs CAP_SYS_NICE and CAP_SYS_ADMIN")
def test_a_long_run_drops_to_the_lowest_priority_and_gets_it_back_before_its_cap(sandbox):
    # A busy program that records its own nice value and its session's autogroup nice whenever they change.
    source = textwrap.dedent(
        """
        import os, time
        seen = None
        while True:
            now = (os.getpriority(os.PRIO_PROCESS, 0), open("/proc/self/autogroup").read().split()[-1])
            if now != seen:
                print(*now, flush=True)
                seen = now
            busy_until = time.process_time() + 0.01
            while time.process_time() < busy_until:
                pass
        """
    )
    calls = []
    result = sandbox.run(source, "", Limits(wall_time_s=3.0), on_long=lambda: calls.append(time.monotonic()))
    assert result.limit_hit is LimitHit.WALL_TIME
    # The two values change one after the other, so the program may catch them half-way: those states are
    # skipped. On a busy machine it may also see its first state only once it was already lowered.
    states = [line for line in result.stdout.splitlines() if len(set(line.split())) == 1]
    assert states in (["0 0", "19 19", "0 0"], ["19 19", "0 0"])
    assert len(calls) == 1


def test_a_long_run_that_mostly_sleeps_keeps_its_priority(sandbox):
    source = "import os, time\ntime.sleep(1.5)\nprint(os.getpriority(os.PRIO_PROCESS, 0))"
    calls = []
    result = sandbox.run(source, "", Limits(wall_time_s=5.0), on_long=lambda: calls.append(1))
    # never lowered: the niceness it was started with (this test process', e.g. under `nice`)
    assert result.stdout == f"{os.getpriority(os.PRIO_PROCESS, 0)}\n" and calls == [1]


def test_a_short_run_is_never_long_and_no_zygote_is_ever_lowered(sandbox):
    calls = []
    result = sandbox.run("print(1)", "", Limits(), on_long=lambda: calls.append(1))
    assert result.stdout == "1\n" and calls == []
    # Zygotes are the children of this process' bwrap processes; long runs above ran in some of them.
    zygotes = [pid for pid in descendants(os.getpid()) if _parent_command(pid) == "bwrap"]
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert zygotes and [os.getpriority(os.PRIO_PROCESS, pid) for pid in zygotes] == [own] * len(zygotes)


def test_cpu_time_of_every_process_of_a_run_is_reported():
    source = textwrap.dedent(
        """
        import os, time
        def burn(seconds):
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass
        if os.fork() == 0:
            burn(0.3)
            os._exit(0)
        burn(0.3)
        os.wait()
        """
    )
    with Sandbox(SandboxConfig(preload=("math",), warm_up=False)) as unlowered:
        result = unlowered.run(source, "", Limits(wall_time_s=30))
    assert result.run_success and result.cpu_s >= 0.6


def test_priority_helpers_cope_with_processes_that_exit_while_they_are_read():
    # A process that forks and reaps short-lived children as fast as it can: their /proc entries vanish between
    # listing, opening and reading, which is what a run's processes do while the supervisor inspects them.
    churn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os\nwhile True:\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)",
        ]
    )
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert run_cpu_seconds(churn.pid) >= 0
            set_run_priority(churn.pid, 0)
    finally:
        churn.kill()
        churn.wait()


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _parent_command(pid: int) -> str:
    return Path(f"/proc/{_parent(pid)}/comm").read_text().strip()


def running_runs() -> list[int]:
    """The processes the zygotes (children of this process' bwrap processes) forked: the runs under way."""
    try:
        zygotes = {pid for pid in descendants(os.getpid()) if _parent_command(pid) == "bwrap"}
        return [pid for pid in descendants(os.getpid()) if pid not in zygotes and _parent(pid) in zygotes]
    except FileNotFoundError:  # a process ended between the listing and the read: look again
        return []
