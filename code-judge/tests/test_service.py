"""The API's job broker against a real redis-server, with no workers: what happens to requests nobody serves."""

from __future__ import annotations

import asyncio

import pytest

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
    await asyncio.sleep(0.2)
    assert (await service.status())["pending"] == 2
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert (await service.status())["pending"] == 0


async def test_unserved_requests_answer_queue_timeout_at_their_deadline(service):
    started = asyncio.get_running_loop().time()
    (verdict,) = await service.submit([program()], with_output=False, timeout_s=0.3)
    assert 0.3 <= asyncio.get_running_loop().time() - started < 1.0
    assert b'"reason":"queue_timeout"' in verdict and b'"stdout"' not in verdict
    status = await service.status()
    assert status["pending"] == 0 and status["queue"] == 1  # still queued: a worker will skip it as expired
