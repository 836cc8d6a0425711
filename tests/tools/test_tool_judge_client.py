"""The shared judge client against a scripted HTTP judge: batching, retries, outages, sharing."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from tool_fake_judge import echo_all, echo_result

from cleaner.saar.outcome import ErrorCategory, OutcomeKind
from cleaner.tools.judge_client import (
    JudgeClient,
    JudgeClientConfig,
    JudgeSubmission,
    JudgeUnavailable,
    shared_judge_client,
)


def fast_config(url: str, **overrides) -> JudgeClientConfig:
    values = dict(url=url, backoff_s=0.01, request_timeout_s=5.0, batch_wait_ms=20.0)
    values.update(overrides)
    return JudgeClientConfig(**values)


async def test_concurrent_runs_share_one_long_batch_request(fake_judge):
    client = JudgeClient(fast_config(fake_judge.url))
    verdicts = await asyncio.gather(*(client.run(JudgeSubmission(code=f"print({i})")) for i in range(10)))
    await client.aclose()
    assert [v.stdout for v in verdicts] == [f"print({i})" for i in range(10)]
    assert fake_judge.paths == ["/run/long-batch"]
    assert float(fake_judge.headers[0]["X-Request-Timeout"]) == pytest.approx(4.5)  # 90% of our own deadline
    assert fake_judge.requests[0]["type"] == "batch"
    assert len(fake_judge.requests[0]["submissions"]) == 10


async def test_batches_are_cut_at_max_batch_size(fake_judge):
    client = JudgeClient(fast_config(fake_judge.url, max_batch_size=4))
    verdicts = await asyncio.gather(*(client.run(JudgeSubmission(code=str(i))) for i in range(10)))
    direct = await client.run_batch([JudgeSubmission(code=str(i), stdin="in") for i in range(6)])
    await client.aclose()
    assert [v.stdout for v in verdicts] == [str(i) for i in range(10)]
    assert [v.stdout for v in direct] == [str(i) for i in range(6)]
    sizes = sorted(len(r["submissions"]) for r in fake_judge.requests)
    assert sizes == [2, 2, 4, 4, 4]
    assert fake_judge.requests[-1]["submissions"][0]["input"] == "in"


async def test_5xx_is_retried_then_succeeds(fake_judge):
    fake_judge.responders = [lambda body: (503, {"detail": "overloaded"})] * 2
    client = JudgeClient(fast_config(fake_judge.url))
    verdict = await client.run(JudgeSubmission(code="ok"))
    await client.aclose()
    assert verdict.stdout == "ok"
    assert len(fake_judge.requests) == 3
    assert client.stats.retries == 2


async def test_backoff_doubles_from_backoff_s(fake_judge, monkeypatch):
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    fake_judge.responders = [lambda body: (503, {"detail": "overloaded"})] * 3
    client = JudgeClient(fast_config(fake_judge.url, backoff_s=0.5))
    monkeypatch.setattr("cleaner.tools.judge_client.asyncio.sleep", recording_sleep)
    verdict = await client.run(JudgeSubmission(code="ok"))
    monkeypatch.undo()
    await client.aclose()
    assert verdict.stdout == "ok"
    assert [wait for wait in waits if wait > 0] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("reason", ["queue_timeout", "worker_starved"])
async def test_only_items_the_judge_could_not_run_are_resent(fake_judge, reason):
    def first(body):
        items = body["submissions"]
        return 200, {
            "results": [
                echo_result(items[0]),
                echo_result(items[1], success=False, run_success=False, reason=reason, stdout=None),
            ]
        }

    fake_judge.responders = [first]
    client = JudgeClient(fast_config(fake_judge.url))
    verdicts = await client.run_batch([JudgeSubmission(code="a"), JudgeSubmission(code="b")])
    await client.aclose()
    assert [v.stdout for v in verdicts] == ["a", "b"]
    assert [len(r["submissions"]) for r in fake_judge.requests] == [2, 1]
    assert fake_judge.requests[1]["submissions"][0]["solution"] == "b"


async def test_model_failures_are_not_retried(fake_judge):
    def failing(body):
        item = body["submissions"][0]
        return 200, {
            "results": [
                echo_result(
                    item,
                    success=False,
                    run_success=False,
                    reason="worker_timeout",
                    stdout="",
                    exception_type=None,
                    limit="wall_time",
                    exit_code=None,
                    signal=9,
                )
            ]
        }

    fake_judge.responders = [failing]
    client = JudgeClient(fast_config(fake_judge.url))
    verdict = await client.run(JudgeSubmission(code="while True: pass"))
    await client.aclose()
    assert (verdict.run_success, verdict.reason, verdict.limit, verdict.signal) == (
        False,
        "worker_timeout",
        "wall_time",
        9,
    )
    assert len(fake_judge.requests) == 1


@pytest.mark.parametrize(
    ("reason", "category"),
    [("internal_error", ErrorCategory.JUDGE_INTERNAL_ERROR), ("worker_starved", ErrorCategory.WORKER_STARVED)],
)
async def test_persistent_service_failure_becomes_infra_outcome(fake_judge, reason, category):
    def broken(body):
        return 200, {
            "results": [echo_result(i, success=False, run_success=False, reason=reason) for i in body["submissions"]]
        }

    fake_judge.responders = [broken] * 10
    client = JudgeClient(fast_config(fake_judge.url, max_retries=2))
    with pytest.raises(JudgeUnavailable) as info:
        await client.run(JudgeSubmission(code="x"))
    await client.aclose()
    assert info.value.outcome.kind is OutcomeKind.INFRA_ERROR
    assert info.value.outcome.category is category
    assert len(fake_judge.requests) == 3


async def test_4xx_is_not_retried(fake_judge):
    fake_judge.responders = [lambda body: (422, {"detail": "bad schema"})]
    client = JudgeClient(fast_config(fake_judge.url))
    with pytest.raises(JudgeUnavailable, match="422"):
        await client.run_batch([JudgeSubmission(code="x")])
    await client.aclose()
    assert len(fake_judge.requests) == 1


async def test_outage_raises_unreachable_after_retries():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = JudgeClient(fast_config(f"http://127.0.0.1:{port}", max_retries=2))
    with pytest.raises(JudgeUnavailable) as info:
        await client.run(JudgeSubmission(code="print(1)"))
    await client.aclose()
    assert info.value.outcome.category is ErrorCategory.JUDGE_UNREACHABLE
    assert client.stats.http_requests == 3


async def test_deadline_applies_to_a_hanging_judge(fake_judge):
    released = threading.Event()

    def hang(body):
        released.wait(timeout=60)  # answers only once the client has given up
        return echo_all(body)

    fake_judge.responders = [hang]
    client = JudgeClient(fast_config(fake_judge.url, request_timeout_s=0.3, max_retries=0))
    try:
        with pytest.raises(JudgeUnavailable) as info:
            await client.run(JudgeSubmission(code="x"))
    finally:
        released.set()
    await client.aclose()
    assert info.value.outcome.category is ErrorCategory.JUDGE_UNREACHABLE


async def test_malformed_answer_is_an_infra_error(fake_judge):
    fake_judge.responders = [lambda body: (200, {"results": []})]
    client = JudgeClient(fast_config(fake_judge.url))
    with pytest.raises(JudgeUnavailable, match="0 results for 1"):
        await client.run(JudgeSubmission(code="x"))
    await client.aclose()


async def test_shared_client_is_reused_and_replaced_after_close(fake_judge):
    config = fast_config(fake_judge.url)
    first = shared_judge_client(config)
    assert shared_judge_client(config) is first
    assert shared_judge_client(fast_config(fake_judge.url, max_retries=0)) is not first
    await first.run(JudgeSubmission(code="x"))
    await first.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await first.run(JudgeSubmission(code="x"))
    second = shared_judge_client(config)
    assert second is not first
    await second.aclose()


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="url"):
        JudgeClientConfig(url="localhost:8088")
    with pytest.raises(ValueError, match="max_batch_size"):
        JudgeClientConfig(max_batch_size=0)
    with pytest.raises(ValueError, match="max_retries"):
        JudgeClientConfig(max_retries=-1)
