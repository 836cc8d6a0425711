"""The API's job broker against a real redis-server, with no workers: what happens to requests nobody serves."""

from __future__ import annotations

import asyncio

import pytest
from judge_harness import SCHEDULING_SLACK_S, wait_until_async

from code_judge.metrics import ApiMetrics
from code_judge.schemas import Submission
from code_judge.service import JudgeService
from code_judge.settings import JudgeSettings


@pytest.fixture
async def service(redis_process):
    broker = JudgeService(JudgeSettings(redis_uri=redis_process.uri), ApiMetrics())
    await broker.start()
    yield broker
    await broker.stop()


def program(code: str = "print(1)") -> Submission:
    return Submission(type="python", solution=code)


async def test_a_cancelled_request_leaves_nothing_pending(service):
    request = asyncio.create_task(service.submit([program(), program()], with_output=True, timeout_s=None))

    async def both_pending() -> bool:
        return (await service.status())["pending"] == 2

    await wait_until_async(both_pending, 30, "the two submissions to be pending")
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert (await service.status())["pending"] == 0


async def test_unserved_requests_answer_queue_timeout_at_their_deadline(service):
    started = asyncio.get_running_loop().time()
    (verdict,) = await service.submit([program()], with_output=False, timeout_s=0.3)
    assert 0.3 <= asyncio.get_running_loop().time() - started < 0.3 + SCHEDULING_SLACK_S
    assert b'"reason":"queue_timeout"' in verdict and b'"stdout"' not in verdict
    status = await service.status()
    assert status["pending"] == 0 and status["queue"] == 1  # still queued: a worker will skip it as expired


async def test_stop_returns_even_when_the_redis_client_swallows_the_cancellation(redis_process):
    """A cancel that lands inside a blocking Redis call can come out as a Redis timeout (and be retried)."""
    import redis

    broker = JudgeService(JudgeSettings(redis_uri=redis_process.uri), ApiMetrics())
    real_pop = broker._queue.pop_replies
    popping = asyncio.Event()

    async def pop_that_swallows_cancellation(block_s: float) -> list[bytes]:
        popping.set()
        try:
            return await real_pop(block_s)
        except asyncio.CancelledError:
            raise redis.TimeoutError("cancelled mid-read") from None

    broker._queue.pop_replies = pop_that_swallows_cancellation
    await broker.start()
    await asyncio.wait_for(popping.wait(), timeout=30)  # the dispatcher is inside its blocking pop
    await asyncio.wait_for(broker.stop(), timeout=SCHEDULING_SLACK_S)  # returns, does not hang
    assert broker._dispatcher.done()


async def test_a_submission_left_without_a_verdict_is_an_error_not_a_shorter_answer(service, monkeypatch):
    """Dropping it would shift every later verdict onto the wrong submission."""
    from code_judge.service import MissingVerdict

    monkeypatch.setattr(service, "_finished_verdict", lambda spec, body, started: None)
    fake_reply = asyncio.create_task(_answer_first_job(service))
    with pytest.raises(MissingVerdict, match=r"submission 1 \(sub_id 'b'\) has no verdict"):
        await service.submit(
            [Submission(type="math", solution="x", sub_id="a"), Submission(type="python", solution="1", sub_id="b")],
            with_output=False,
            timeout_s=5,
        )
    await fake_reply


async def _answer_first_job(service) -> None:
    """Play a worker: wait for the queued job and resolve it with a verdict body."""
    while not service._pending:
        await asyncio.sleep(0.01)
    (key,) = service._pending
    service._resolve([key + b' {"reason": ""}'])
