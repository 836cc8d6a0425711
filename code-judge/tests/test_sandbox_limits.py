"""Hard limits are set outside the program's reach: each test tries to lift or outrun one, for real."""

from __future__ import annotations

import errno
import signal
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from judge_harness import SCHEDULING_SLACK_S

from code_judge.execution import LimitHit, Limits
from code_judge.sandbox import Sandbox


def timed_run(sandbox: Sandbox, source: str, limits: Limits):
    started = time.monotonic()
    result = sandbox.run(textwrap.dedent(source), "", limits)
    return result, time.monotonic() - started


@pytest.mark.parametrize(
    "source",
    [
        "while True: pass",
        # disarm every in-process timer and raise the CPU limit, then sleep
        """
        import resource, signal, time
        signal.alarm(0)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            pass
        time.sleep(100)
        """,
        "import os; os.system('sleep 100')",  # glibc system() keeps waiting through signals
    ],
    ids=["busy-loop", "disarm-and-sleep", "os-system-sleep"],
)
def test_wall_time_limit_stops_the_program_at_the_limit(sandbox, source):
    limits = Limits(wall_time_s=1.0, cpu_time_s=5)
    result, elapsed = timed_run(sandbox, source, limits)
    assert result.limit_hit is LimitHit.WALL_TIME
    assert not result.run_success
    assert 1.0 <= elapsed < 1.0 + SCHEDULING_SLACK_S
    assert 1.0 <= result.cost_s < 1.0 + SCHEDULING_SLACK_S


def test_a_program_sleeping_exactly_the_limit_is_stopped_by_it(sandbox):
    """The zygote's wait ends at the cap, not up to 0.1 % of it later (select's slack), when the sleep is over."""
    limits = Limits(wall_time_s=2.0, cpu_time_s=5)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: sandbox.run("import time\ntime.sleep(2)", "", limits), range(4)))
    # Killed at the cap, or ended by itself at the very cap: a timeout either way, never a success.
    assert [(r.limit_hit, r.run_success) for r in results] == [(LimitHit.WALL_TIME, False)] * 4
    assert all(r.signal in (signal.SIGKILL, None) for r in results)
    assert all(2.0 <= r.cost_s < 2.0 + SCHEDULING_SLACK_S for r in results)


def test_cpu_limit_cannot_be_raised(sandbox):
    result, _ = timed_run(
        sandbox,
        """
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (hard + 100, hard + 100))
            print("raised", flush=True)
        except (ValueError, OSError):
            print("refused", soft, hard, flush=True)
        while True:
            pass
        """,
        Limits(wall_time_s=10, cpu_time_s=1),
    )
    assert result.stdout == "refused 1 2\n"
    assert result.limit_hit is LimitHit.CPU_TIME
    assert result.signal in (signal.SIGXCPU, signal.SIGKILL)


def test_memory_limit_cannot_be_raised_and_4_gib_fails(sandbox):
    result, _ = timed_run(
        sandbox,
        """
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print("raised", flush=True)
        except (ValueError, OSError):
            print("refused")
        block = bytearray(4 * 1024**3)
        """,
        Limits(memory_bytes=256 * 1024**2),
    )
    assert result.stdout == "refused\n"
    assert result.exception_type == "MemoryError"
    assert result.limit_hit is LimitHit.MEMORY


def test_memory_limit_allows_the_budget_on_top_of_the_preloaded_modules(sandbox):
    result, _ = timed_run(sandbox, "block = bytearray(200 * 1024**2); print(len(block))", Limits())
    assert result.run_success and result.stdout == f"{200 * 1024**2}\n"


def test_fork_bomb_is_capped_and_cleaned_up(sandbox):
    result, elapsed = timed_run(
        sandbox,
        """
        import os, time
        started = 0
        try:
            for _ in range(1000):
                if os.fork() == 0:
                    while True:
                        try:
                            os.fork()
                        except OSError:
                            time.sleep(0.01)
                started += 1
        except BlockingIOError:
            print("fork refused after", started)
            raise
        """,
        Limits(wall_time_s=60, max_processes=16),
    )
    assert result.stdout.startswith("fork refused after")
    assert int(result.stdout.split()[-1]) < 16
    assert result.limit_hit is LimitHit.PROCESSES
    assert elapsed < SCHEDULING_SLACK_S  # the forking children were stopped with the run, not at its wall limit
    after, _ = timed_run(sandbox, "import os; print([p for p in os.listdir('/proc') if p.isdigit()])", Limits())
    assert after.stdout.count("'") == 4  # only pid 1 (the zygote) and this program


def test_file_size_limit(sandbox):
    result, _ = timed_run(
        sandbox,
        """
        with open("big.bin", "wb") as out:
            out.write(b"x" * (2 * 1024**2))
        """,
        Limits(max_file_size_bytes=1024**2),
    )
    assert result.exception_type == "OSError"
    assert f"[Errno {errno.EFBIG}]" in result.exception_message
    assert result.limit_hit is LimitHit.FILE_SIZE


def test_nonsensical_limits_are_rejected_by_name(sandbox):
    with pytest.raises(ValueError, match="Limits.wall_time_s must be positive"):
        sandbox.run("print(1)", "", Limits(wall_time_s=0))
