"""The HTTP API end to end: a real `code-judge serve` (embedded redis-server, bubblewrap sandbox, 2 workers)."""

from __future__ import annotations

import asyncio
import json
import os

import httpx
import pytest
from judge_harness import SCHEDULING_SLACK_S, Launcher, wait_until, worker_pids

TIME_LIMIT_S = 2.0


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    launcher = Launcher(tmp_path_factory.mktemp("api"))
    service = launcher("serve", MAX_WORKERS="2", MAX_EXECUTION_TIME=str(TIME_LIMIT_S), PRELOAD_MODULES="math,numpy")
    service.wait_http().wait_workers(2)
    yield service
    launcher.stop_all()


@pytest.fixture(scope="module")
def client(judge):
    with httpx.Client(base_url=judge.url, timeout=30) as client:
        yield client


def test_hello_world_judge_succeeds(client):
    body = {"type": "python", "solution": "print('hello world')", "expected_output": "hello world\n"}
    verdict = client.post("/judge", json=body).json()
    assert verdict["success"] is True and verdict["run_success"] is True and verdict["reason"] == ""
    assert 0 < verdict["cost"] < 1
    assert "stdout" not in verdict


def test_run_reports_the_exception_at_the_users_own_line(client):
    verdict = client.post(
        "/run", json={"type": "python", "solution": "x = 1\nprint(x)\nprint(y)", "sub_id": "q7"}
    ).json()
    assert verdict["sub_id"] == "q7"
    assert (verdict["success"], verdict["run_success"], verdict["reason"]) == (False, False, "")
    assert verdict["stdout"] == "1\n"
    assert verdict["exception_type"] == "NameError" and verdict["exception_line"] == 3
    assert "name 'y' is not defined" in verdict["exception_message"]
    assert "NameError" in verdict["stderr"] and verdict["exit_code"] == 1


def test_stdin_and_preloaded_numpy(client):
    source = "import numpy as np\nprint(int(np.array([int(t) for t in input().split()]).sum()))"
    verdict = client.post("/run", json={"type": "python", "solution": source, "input": "1 2 3\n"}).json()
    assert verdict["stdout"] == "6\n" and verdict["success"] is True


@pytest.mark.parametrize("endpoint", ["/run/batch", "/judge/batch", "/run/long-batch", "/judge/long-batch"])
def test_batches_answer_in_input_order(client, endpoint):
    submissions = [
        {"type": "python", "solution": f"print({i} * {i})", "expected_output": str(i * i), "sub_id": f"s{i}"}
        for i in range(4)
    ]
    submissions[2]["expected_output"] = "wrong"
    answer = client.post(endpoint, json={"type": "batch", "sub_id": "b1", "submissions": submissions}).json()
    assert answer["sub_id"] == "b1"
    assert [r["sub_id"] for r in answer["results"]] == ["s0", "s1", "s2", "s3"]
    assert [r["success"] for r in answer["results"]] == [True, True, False, True]
    assert all(("stdout" in r) == endpoint.startswith("/run") for r in answer["results"])


async def test_more_concurrent_requests_than_redis_connections(judge):
    async with httpx.AsyncClient(base_url=judge.url, timeout=60, limits=httpx.Limits(max_connections=100)) as client:
        bodies = [{"type": "python", "solution": f"print({i})", "expected_output": str(i)} for i in range(100)]
        responses = await asyncio.gather(*(client.post("/judge", json=body) for body in bodies))
    assert [r.status_code for r in responses] == [200] * 100
    assert all(r.json()["success"] for r in responses)


def test_missing_sub_ids_are_generated(client):
    answer = client.post("/judge/batch", json={"type": "batch", "submissions": [{"type": "python", "solution": "1"}]})
    batch_id, item_id = answer.json()["sub_id"], answer.json()["results"][0]["sub_id"]
    assert len({batch_id, item_id}) == 2 and all(len(i) == 36 for i in (batch_id, item_id))


def test_infinite_loop_is_stopped_at_the_time_limit_with_upstreams_timeout_line(client):
    source = "print('started', flush=True)\nwhile True:\n    pass"
    verdict = client.post("/run", json={"type": "python", "solution": source}).json()
    assert verdict["reason"] == "worker_timeout" and verdict["run_success"] is False
    assert verdict["limit"] in ("wall_time", "cpu_time")
    assert TIME_LIMIT_S - 0.5 < verdict["cost"] < TIME_LIMIT_S + SCHEDULING_SLACK_S
    assert verdict["stdout"] == "started\nSuicide from timeout.\n"


async def test_upstreams_sleep_for_the_whole_default_limit_times_out_on_run_and_judge(launch):
    """Upstream's own test at its default 10 s limit, where select()'s slack (0.1 % of the wait) let it succeed."""
    service = launch("serve", MAX_WORKERS="1", MAX_EXECUTION_TIME="10").wait_http().wait_workers(1)
    body = {"type": "python", "solution": "from time import sleep\nsleep(10)", "input": "a", "expected_output": "a"}
    async with httpx.AsyncClient(base_url=service.url, timeout=60) as client:
        answers = await asyncio.gather(*(client.post(endpoint, json=body) for endpoint in ["/run", "/judge"] * 2))
    verdicts = [answer.json() for answer in answers]
    assert [(v["success"], v["run_success"], v["reason"]) for v in verdicts] == [(False, False, "worker_timeout")] * 4
    assert all(v["cost"] >= 10 for v in verdicts)
    assert [v["stdout"].strip() for v in verdicts[::2]] == ["Suicide from timeout."] * 2


def test_upstreams_program_leaving_a_process_running_waits_for_it_as_cpython_does(client):
    """Upstream's own test: the interpreter joins a non-daemon `multiprocessing.Process` at exit, so the run ends at
    the time limit."""
    source = (
        "from time import sleep\nfrom multiprocessing import Process\n\n"
        "def worker():\n    sleep(100)\n\n"
        "p = Process(target=worker)\np.start()\nsleep(1)\nprint('main done')\n"
    )
    verdict = client.post("/judge", json={"type": "python", "solution": source, "expected_output": "a"}).json()
    assert (verdict["success"], verdict["run_success"], verdict["reason"]) == (False, False, "worker_timeout")


def test_long_output_is_cut_and_flagged(client):
    verdict = client.post("/run", json={"type": "python", "solution": "print('x' * 5000)"}).json()
    assert verdict["stdout"] == "x" * 1000 and verdict["truncated"] is True and verdict["success"] is True


def test_math_type_gets_invalid_input(client):
    verdict = client.post("/run", json={"type": "math", "solution": "1 + 1"}).json()
    assert verdict["reason"] == "invalid_input" and verdict["success"] is False
    assert "types 'python' and 'cpp'" in verdict["stderr"]


@pytest.mark.parametrize(
    "body",
    [
        {"type": "python"},
        {"type": "ruby", "solution": "puts 1"},
        {"type": "python", "solution": 5},
        {"type": "python", "solution": "print('\ud800')"},  # a lone surrogate is not text
        {"type": "python", "solution": "print(1)", "expected_output": "\udfff"},
    ],
)
def test_schema_errors_are_422(client, body):
    raw = json.dumps(body)  # ASCII with \u escapes, as a client in any language may send
    response = client.post("/run", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "body"  # FastAPI's error shape


def test_empty_batch_is_422(client):
    assert client.post("/run/long-batch", json={"type": "batch", "submissions": []}).status_code == 422


def test_client_deadline_bounds_the_wait(client):
    verdict = client.post(
        "/run",
        json={"type": "python", "solution": "import time\ntime.sleep(1.5)"},
        headers={"X-Request-Timeout": "0.3"},
    ).json()
    # The answer is the deadline's, not the program's (which would print nothing and succeed after 1.5 s).
    assert verdict["reason"] == "queue_timeout" and "0.3 s" in verdict["stderr"]
    bad = client.post("/run", json={"type": "python", "solution": "1"}, headers={"X-Request-Timeout": "-1"})
    assert bad.status_code == 422


def test_status_counts_live_workers_and_names_the_sandbox(client):
    status = client.get("/status").json()
    assert status["num_workers"] == 2 and status["sandbox"] == "bwrap"
    assert isinstance(status["queue"], int)


def test_metrics_are_prometheus_text(client):
    client.post("/judge", json={"type": "python", "solution": "print(1)"})
    text = client.get("/metrics").text
    assert 'code_judge_requests_total{endpoint="/judge"}' in text
    assert "code_judge_live_workers 2.0" in text
    assert "code_judge_request_seconds_bucket" in text


def test_sigterm_stops_workers_and_embedded_redis(launch):
    service = launch("serve", MAX_WORKERS="1").wait_http().wait_workers(1)
    children = [int(c) for c in open(f"/proc/{service.process.pid}/task/{service.process.pid}/children").read().split()]
    assert worker_pids(service.process.pid)
    assert service.stop() == 0
    # redis-server, the workers (and their sandboxes), multiprocessing's resource tracker: all gone.
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in children), 5, "children to exit")
