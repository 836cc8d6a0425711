"""Never lose a request: dead workers, scale-out worker groups, a Redis restart under load, overload."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from judge_harness import wait_until, worker_pids


def sleeper(i: int, seconds: float) -> dict:
    return {"type": "python", "solution": f"import time\ntime.sleep({seconds})\nprint({i})", "expected_output": str(i)}


def test_a_job_whose_worker_is_killed_is_rerun(launch):
    service = launch("serve", MAX_WORKERS="1").wait_http().wait_workers(1)
    (worker,) = worker_pids(service.process.pid)
    with ThreadPoolExecutor(1) as pool:
        long_job = {"type": "python", "solution": "import time\nprint(7, flush=True)\ntime.sleep(100)"}
        answer = pool.submit(httpx.post, f"{service.url}/run", json=long_job, timeout=120)
        # Leased (pending, no longer queued): the idle worker is running it, for 100 s unless stopped.
        wait_until(
            lambda: service.status()["pending"] == 1 and service.status()["queue"] == 0, 30, "the job to be leased"
        )
        os.kill(worker, signal.SIGKILL)
        verdict = answer.result().json()
    # Re-run on the replacement worker (the only one left to answer), to the time limit a first run has.
    assert verdict["reason"] == "worker_timeout" and verdict["stdout"] == "7\nSuicide from timeout.\n"
    assert "1 re-queued" in service.log()
    wait_until(lambda: service.status()["num_workers"] == 1, 30, "the replacement worker")
    assert worker not in worker_pids(service.process.pid)


def test_two_worker_groups_share_one_redis(launch, redis_process):
    api = launch("api", "--redis-uri", redis_process.uri).wait_http()
    group_a = launch("worker", "--redis-uri", redis_process.uri, "--workers", "1", http=False)
    launch("worker", "--redis-uri", redis_process.uri, "--workers", "1", http=False)
    api.wait_workers(2)
    batch = {"type": "batch", "submissions": [sleeper(i, 0.2) for i in range(6)]}
    results = httpx.post(f"{api.url}/judge/long-batch", json=batch, timeout=60).json()["results"]
    assert [r["success"] for r in results] == [True] * 6
    assert group_a.stop() == 0
    # A clean stop deregisters at once (no wait for the heartbeat to go stale); the other group keeps serving.
    assert api.status()["num_workers"] == 1
    assert httpx.post(f"{api.url}/judge", json=sleeper(1, 0), timeout=60).json()["success"] is True


def test_redis_restart_under_load_loses_nothing(launch, redis_process):
    api = launch("api", "--redis-uri", redis_process.uri).wait_http()
    with ThreadPoolExecutor(16) as pool:
        answers = [pool.submit(httpx.post, f"{api.url}/judge", json=sleeper(i, 0.3), timeout=60) for i in range(16)]
        # No workers yet, so every request is verifiably in Redis before the load starts.
        wait_until(lambda: api.status()["queue"] == 16, 30, "all 16 requests to be queued")
        launch("worker", "--redis-uri", redis_process.uri, "--workers", "2", http=False)
        wait_until(lambda: sum(a.done() for a in answers) >= 2, 60, "the workers to be busy")
        redis_process.kill()  # everything queued or leased in Redis is gone
        # Refused, not hung: httpx would raise if no answer came within its 30 s.
        refused = httpx.post(f"{api.url}/judge", json=sleeper(99, 0), headers={"X-Request-Timeout": "2"}, timeout=30)
        assert refused.status_code == 503 and refused.headers["Retry-After"]
        time.sleep(1.0)
        redis_process.start()  # same port, empty
        verdicts = [a.result().json() for a in answers]
    assert [v for v in verdicts if v.get("success") is not True] == []


def test_a_full_queue_answers_503_with_retry_after(launch):
    service = launch("serve", MAX_WORKERS="1", MAX_QUEUE_LENGTH="3").wait_http().wait_workers(1)
    batch = {"type": "batch", "submissions": [sleeper(i, 0) for i in range(5)]}
    response = httpx.post(f"{service.url}/run/long-batch", json=batch, timeout=30)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "MAX_QUEUE_LENGTH=3" in response.json()["detail"]
    batch["submissions"] = batch["submissions"][:3]
    assert httpx.post(f"{service.url}/run/long-batch", json=batch, timeout=30).status_code == 200


def test_serve_restarts_its_embedded_redis(launch):
    service = launch("serve", MAX_WORKERS="1").wait_http().wait_workers(1)
    (redis_pid,) = [
        int(c)
        for c in open(f"/proc/{service.process.pid}/task/{service.process.pid}/children").read().split()
        if open(f"/proc/{c}/comm").read().strip() == "redis-server"
    ]
    os.kill(redis_pid, signal.SIGKILL)

    def served() -> bool:
        response = httpx.post(f"{service.url}/judge", json=sleeper(5, 0), timeout=30)
        return response.status_code == 200 and response.json()["success"] is True

    wait_until(served, 30, "a verdict after the embedded redis-server was killed", 0.5)
    assert "restarting it" in service.log()
