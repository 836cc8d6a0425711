"""The API's job broker against a real redis-server, with no workers: what happens to requests nobody serves.

Every wait here is bounded by BOUND_S: a request that hangs fails the test at once, naming what it waited for.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

import pytest
import redis
from judge_harness import SCHEDULING_SLACK_S

from code_judge.metrics import ApiMetrics
from code_judge.schemas import Submission
from code_judge.service import JudgeService, MissingVerdict
from code_judge.settings import JudgeSettings

T = TypeVar("T")
BOUND_S = 5.0
# A backstop for a hang outside the bounded waits (e.g. inside a fixture).
pytestmark = pytest.mark.timeout(30)


async def within_bound(awaitable: Awaitable[T], what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, BOUND_S)
    except TimeoutError:
        raise AssertionError(f"waited more than {BOUND_S:g} s for {what}") from None


@pytest.fixture
async def service(redis_process):
    broker = JudgeService(JudgeSettings(redis_uri=redis_process.uri), ApiMetrics())
    await within_bound(broker.start(), "the service to start")
    yield broker
    await within_bound(broker.stop(), "the service to stop")


def program(code: str = "print(1)") -> Submission:
    return Submission(type="python", solution=code)


class EnqueueHooks:
    """Wraps the service's Redis enqueue: `inside` is set when a request is in the call, `returned` when the jobs
    are in Redis. With `swallow_cancel`, a cancellation inside the call is swallowed and the jobs queued anyway, as
    redis-py may do when it turns a cancellation inside a blocking call into a timeout and retries."""

    def __init__(self, service: JudgeService, *, swallow_cancel: bool = False):
        self.inside = asyncio.Event()
        self.returned = asyncio.Event()
        self._real = service._queue.enqueue
        self._swallow_cancel = swallow_cancel
        service._queue.enqueue = self._enqueue

    async def _enqueue(self, jobs: list[bytes], max_queue_length: int) -> bool:
        self.inside.set()
        if self._swallow_cancel:
            try:
                await asyncio.Event().wait()  # a call that only a cancellation ends
            except asyncio.CancelledError:
                pass
        queued = await self._real(jobs, max_queue_length)
        self.returned.set()
        return queued


async def cancel_and_check_nothing_pending(service: JudgeService, request: asyncio.Task[list[bytes]]) -> None:
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within_bound(request, "the cancelled request to end")
    assert (await within_bound(service.status(), "/status"))["pending"] == 0


def submit_two(service: JudgeService) -> asyncio.Task[list[bytes]]:
    return asyncio.create_task(service.submit([program(), program()], with_output=True, timeout_s=None))


async def test_a_request_cancelled_inside_an_enqueue_that_swallows_the_cancel_ends_at_once(service):
    hooks = EnqueueHooks(service, swallow_cancel=True)
    request = submit_two(service)
    await within_bound(hooks.inside.wait(), "the request to be inside its enqueue")
    assert (await service.status())["pending"] == 2  # registered before the call returns: the window of the cancel
    await cancel_and_check_nothing_pending(service, request)
    # The abandoned call queues the jobs after the request left; nobody waits for their verdicts.
    await within_bound(hooks.returned.wait(), "the abandoned enqueue to finish")
    status = await service.status()
    assert status["pending"] == 0 and status["queue"] == 2


async def test_a_request_cancelled_while_redis_is_frozen_ends_at_once(service, redis_process):
    hooks = EnqueueHooks(service)
    redis_process.process.send_signal(signal.SIGSTOP)  # the enqueue's reply never comes until SIGCONT
    try:
        request = submit_two(service)
        await within_bound(hooks.inside.wait(), "the request to be inside its enqueue")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await within_bound(request, "the cancelled request to end")
    finally:
        redis_process.process.send_signal(signal.SIGCONT)
    assert (await within_bound(service.status(), "/status after Redis resumed"))["pending"] == 0


async def test_a_request_cancelled_after_its_enqueue_leaves_nothing_pending(service):
    hooks = EnqueueHooks(service)
    request = submit_two(service)
    await within_bound(hooks.returned.wait(), "the request's jobs to be queued")
    await cancel_and_check_nothing_pending(service, request)
    assert (await service.status())["queue"] == 2


async def test_unserved_requests_answer_queue_timeout_at_their_deadline(service):
    started = asyncio.get_running_loop().time()
    (verdict,) = await within_bound(service.submit([program()], with_output=False, timeout_s=0.3), "the verdict")
    assert 0.3 <= asyncio.get_running_loop().time() - started < 0.3 + SCHEDULING_SLACK_S
    assert b'"reason":"queue_timeout"' in verdict and b'"stdout"' not in verdict
    status = await service.status()
    assert status["pending"] == 0 and status["queue"] == 1  # still queued: a worker will skip it as expired


async def test_stop_returns_even_when_the_redis_client_swallows_the_cancellation(redis_process):
    """A cancel that lands inside a blocking Redis call can come out as a Redis timeout (and be retried)."""
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
    await within_bound(broker.start(), "the service to start")
    await within_bound(popping.wait(), "the dispatcher to be inside its blocking pop")
    await within_bound(broker.stop(), "stop() to return")
    assert broker._dispatcher.done()


async def test_a_submission_left_without_a_verdict_is_an_error_not_a_shorter_answer(service, monkeypatch):
    """Dropping it would shift every later verdict onto the wrong submission."""
    monkeypatch.setattr(service, "_finished_verdict", lambda spec, body, started: None)
    hooks = EnqueueHooks(service)

    async def answer_the_queued_job() -> None:
        """Play a worker: resolve the queued job with a verdict body."""
        await hooks.returned.wait()
        (key,) = service._pending
        service._resolve([key + b' {"reason": ""}'])

    fake_reply = asyncio.create_task(answer_the_queued_job())
    with pytest.raises(MissingVerdict, match=r"submission 1 \(sub_id 'b'\) has no verdict"):
        await within_bound(
            service.submit(
                [
                    Submission(type="math", solution="x", sub_id="a"),
                    Submission(type="python", solution="1", sub_id="b"),
                ],
                with_output=False,
                timeout_s=BOUND_S,
            ),
            "the submission's answer",
        )
    await within_bound(fake_reply, "the fake reply")
