"""A real `code-judge serve` full of infinite loops and sleepers: short programs must not wait behind them.

Both tests run one worker process with 16 slots of which 2 are short slots (the defaults per worker), so every
long program below holds a slot of that one worker while the short programs arrive.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from judge_harness import SCHEDULING_SLACK_S, wait_until

CAP_S = 8.0
LOOP = "while True:\n    pass"
SLEEP = "import time\ntime.sleep(100)"


def post(url: str, source: str, expected: str | None = None) -> tuple[dict, float]:
    """The verdict and the moment (time.monotonic) it arrived."""
    body = {"type": "python", "solution": source, "expected_output": expected}
    verdict = httpx.post(f"{url}/judge", json=body, timeout=60).json()
    return verdict, time.monotonic()


def test_short_programs_are_answered_while_loops_and_sleepers_hold_the_slots(launch):
    # No starvation verdicts here: on a shared machine the loops' CPU share is not ours to promise.
    service = (
        launch("serve", MAX_WORKERS="1", MAX_EXECUTION_TIME=str(CAP_S), STARVED_CPU_SHARE="0", WORKER_SLOTS="16")
        .wait_http()
        .wait_workers(1)
    )
    long_programs = [LOOP] * 3 + [SLEEP] * 3
    with ThreadPoolExecutor(len(long_programs) + 12) as pool:
        long_answers = [pool.submit(post, service.url, source) for source in long_programs]
        # Every long program is leased (running), none waits in the queue.
        wait_until(
            lambda: service.status()["pending"] == len(long_programs) and service.status()["queue"] == 0,
            30,
            "every long program to be running",
        )
        short_answers = [pool.submit(post, service.url, f"print({i} * 3)", f"{i * 3}\n") for i in range(12)]
        shorts = [answer.result() for answer in short_answers]
        longs = [answer.result() for answer in long_answers]
    assert [verdict["success"] for verdict, _ in shorts] == [True] * 12
    # The short programs, sent after the long ones started, were all answered before any long one reached its cap.
    assert max(arrived for _, arrived in shorts) < min(arrived for _, arrived in longs)
    for verdict, _ in longs:
        assert verdict["reason"] == "worker_timeout" and CAP_S - 0.5 < verdict["cost"] < CAP_S + SCHEDULING_SLACK_S
    assert [verdict["limit"] for verdict, _ in longs[3:]] == ["wall_time"] * 3
    # A zygote that missed its deadline on a loaded machine is killed with its program, and the run's CPU time is
    # unknown (null): the comparison is over the runs whose CPU time was measured.
    loop_cpu = [verdict["cpu_cost"] for verdict, _ in longs[:3] if verdict["cpu_cost"] is not None]
    sleep_cpu = [verdict["cpu_cost"] for verdict, _ in longs[3:] if verdict["cpu_cost"] is not None]
    assert min(loop_cpu, default=math.inf) > max(
        sleep_cpu, default=0.0
    )  # loops burned CPU until the cap, sleepers did not


def test_a_loop_that_could_not_get_the_cpu_share_it_was_promised_is_starved_not_timed_out(launch):
    # A deliberately saturated configuration: each run is promised 90% of a CPU, and three loops per core,
    # all started at once, compete for the CPUs, so none can get it. A sleeper next to them never waits for a
    # CPU: a plain timeout.
    loops = 3 * (os.cpu_count() or 1)
    service = (
        launch(
            "serve",
            MAX_WORKERS="1",
            WORKER_SLOTS=str(loops + 1),
            WORKER_SHORT_SLOTS=str(loops + 1),
            MAX_EXECUTION_TIME="3",
            STARVED_CPU_SHARE="0.9",
            DEMOTED_NICE="0",
        )
        .wait_http()
        .wait_workers(1)
    )
    with ThreadPoolExecutor(loops + 1) as pool:
        answers = [pool.submit(post, service.url, source) for source in [LOOP] * loops + [SLEEP]]
        verdicts = [answer.result()[0] for answer in answers]
    *looped, slept = verdicts
    for verdict in looped:
        assert verdict["reason"] == "worker_starved" and verdict["limit"] == "wall_time"
        assert verdict["run_success"] is False
        assert 0 < verdict["cpu_cost"] < 0.9 * verdict["cost"]
    assert slept["reason"] == "worker_timeout" and slept["cpu_cost"] < 0.1
