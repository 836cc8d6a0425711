"""The API process' job broker: queues submissions, waits for their verdicts, survives Redis restarts.

One background task pops every reply addressed to this process (one blocking Redis call for all requests in
flight) and resolves the matching futures. The same task re-queues the jobs of dead workers, notices when Redis
restarted (its run_id changed, so queued jobs are gone) and re-submits everything still pending, and fails
pending requests with `internal_error` when Redis stays unreachable for `redis_outage_timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import orjson
import redis

from code_judge.metrics import ApiMetrics
from code_judge.queue import WORKER_DIED, ApiQueue, QueueKeys, ReapPolicy, connect_async, sandbox_mode_of
from code_judge.schemas import Submission, SubmissionType
from code_judge.settings import JudgeSettings
from code_judge.verdict import INTERNAL_ERROR, INVALID_INPUT, QUEUE_TIMEOUT, JobSpec, service_verdict

logger = logging.getLogger(__name__)
T = TypeVar("T")

RUNNABLE_TYPES = (SubmissionType.PYTHON, SubmissionType.CPP)
_REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError)
_POP_BLOCK_S = 0.5
_MAINTENANCE_INTERVAL_S = 1.0
_RECONNECT_DELAY_S = 0.2
# Longest a stopping API waits for its dispatcher: one blocking pop, one maintenance round, one reconnect pause.
_STOP_TIMEOUT_S = 5.0


class Overloaded(Exception):
    """The queue is full; the client should retry later."""


class RedisUnavailable(Exception):
    """Redis could not take the submission; the client should retry later."""


class MissingVerdict(RuntimeError):
    """A submission ended up without a verdict: a bug, reported rather than misaligning answers with requests."""


@dataclass
class _Pending:
    future: asyncio.Future[bytes]
    payload: bytes  # kept to re-submit the job if Redis loses it


@dataclass
class _Item:
    """One submission of a request on its way to a verdict."""

    spec: JobSpec
    verdict: bytes | None = None
    key: bytes | None = None  # the queued job's id; None for a submission answered without running
    payload: bytes = b""
    future: asyncio.Future[bytes] | None = None


def _verdict_of(index: int, item: _Item) -> bytes:
    if item.verdict is None:
        raise MissingVerdict(f"submission {index} (sub_id {item.spec.sub_id!r}) has no verdict")
    return item.verdict


async def _cancellable(call: Awaitable[T]) -> T:
    """Await one Redis call of a request so that the request's cancellation ends it at once.

    A cancellation delivered inside a blocking redis-py call can come out as a timeout that the client retries
    (`stop` guards its dispatcher against the same thing): the call runs in a task of its own, the request waits
    on that task through a shield, and on cancellation the request leaves while the call is cancelled behind it.
    A call that completes anyway (jobs queued for a request that left) is harmless: their replies match nothing.
    """
    call_task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(call_task)
    except asyncio.CancelledError:
        call_task.cancel()
        call_task.add_done_callback(_drop_outcome)
        raise


def _drop_outcome(task: asyncio.Future[object]) -> None:
    """Retrieve a task's exception so that a call abandoned by its cancelled request logs no 'never retrieved'."""
    if not task.cancelled():
        task.exception()


class JudgeService:
    def __init__(self, settings: JudgeSettings, metrics: ApiMetrics):
        if settings.redis_uri is None:
            raise ValueError("the API needs REDIS_URI (or use `code-judge serve`, which starts its own Redis)")
        self._settings = settings
        self.metrics = metrics
        self._client = connect_async(settings.redis_uri, settings.redis_socket_timeout)
        self._queue = ApiQueue(self._client, QueueKeys(settings.redis_key_prefix), secrets.token_hex(8))
        self._policy = ReapPolicy(
            settings.worker_heartbeat_timeout, settings.max_attempts, settings.redis_result_expire
        )
        self._pending: dict[bytes, _Pending] = {}
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopping = False
        self._run_id: str | None = None

    async def start(self) -> None:
        self._run_id = await self._queue.server_run_id()
        self._dispatcher = asyncio.create_task(self._dispatch_forever(), name="code-judge-dispatcher")

    async def stop(self) -> None:
        # The dispatcher also checks this flag: a cancellation delivered while the Redis client is inside a
        # blocking call can be swallowed there (seen: an API that kept polling Redis after SIGTERM, forever).
        self._stopping = True
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            done, _ = await asyncio.wait([self._dispatcher], timeout=_STOP_TIMEOUT_S)
            if not done:
                logger.error("the reply dispatcher did not stop within %.0f s; closing Redis under it", _STOP_TIMEOUT_S)
        await self._client.aclose()

    async def status(self) -> dict[str, object]:
        try:
            live = await _cancellable(self._queue.live_workers(self._settings.worker_heartbeat_timeout))
            queue_length = await _cancellable(self._queue.queue_length())
        except _REDIS_ERRORS as exc:
            raise RedisUnavailable(f"redis is unavailable ({exc})") from exc
        by_mode: dict[str, int] = {}
        for worker_id in live:
            mode = sandbox_mode_of(worker_id)
            by_mode[mode] = by_mode.get(mode, 0) + 1
        self.metrics.queue_length.set(queue_length)
        self.metrics.live_workers.set(len(live))
        sandbox = None if not by_mode else next(iter(by_mode)) if len(by_mode) == 1 else "mixed"
        return {
            "queue": queue_length,
            "num_workers": len(live),
            "sandbox": sandbox,
            "workers_by_sandbox": by_mode,
            "pending": len(self._pending),
        }

    async def submit(
        self, submissions: Sequence[Submission], with_output: bool, timeout_s: float | None
    ) -> list[bytes]:
        """The verdict JSON of each submission, in order. Raises Overloaded / RedisUnavailable before queueing."""
        started = time.monotonic()
        wait_s = self._settings.max_queue_wait_time if timeout_s is None else timeout_s
        deadline = time.time() + wait_s
        items = [self._prepare(sub, with_output, deadline) for sub in submissions]
        queued = [item for item in items if item.key is not None]
        if queued:
            try:
                await self._enqueue([item.payload for item in queued])
                await self._collect(queued, deadline, wait_s, started)
            finally:
                # Answered, timed out, refused or cancelled (also inside the enqueue): nobody waits for these any more.
                self._forget([item.key for item in queued])
                self.metrics.pending.set(len(self._pending))
        return [_verdict_of(index, item) for index, item in enumerate(items)]

    def _prepare(self, sub: Submission, with_output: bool, deadline: float) -> _Item:
        """The item for one submission: answered at once when it cannot run, else a job waiting for its verdict."""
        spec = JobSpec(
            sub_id=str(uuid.uuid4()) if sub.sub_id is None else sub.sub_id,
            expected_output=sub.expected_output,
            with_output=with_output,
            max_output_chars=self._settings.max_stdout_error_length,
        )
        if sub.type not in RUNNABLE_TYPES:
            message = f"type {sub.type.value!r} is not supported: this judge runs types 'python' and 'cpp'"
            return _Item(spec, verdict=self._service_verdict(spec, INVALID_INPUT, message, 0.0))
        job_id = uuid.uuid4().hex
        payload = orjson.dumps(
            {
                "id": job_id,
                "reply": self._queue.reply_key,
                "sub_id": spec.sub_id,
                "type": sub.type.value,
                "code": sub.solution,
                "stdin": sub.input or "",
                "expected": sub.expected_output,
                "with_output": with_output,
                "deadline": deadline,
            }
        )
        item = _Item(spec, key=job_id.encode(), payload=payload, future=asyncio.get_running_loop().create_future())
        self._pending[item.key] = _Pending(item.future, payload)
        return item

    async def _collect(self, items: list[_Item], deadline: float, wait_s: float, started: float) -> None:
        """Wait for the queued items' verdicts until the deadline; what has none by then answers queue_timeout."""
        self.metrics.pending.set(len(self._pending))
        done, _ = await asyncio.wait([item.future for item in items], timeout=max(0.0, deadline - time.time()))
        for item in items:
            if item.future not in done:
                message = f"no verdict within the request's deadline of {wait_s:g} s"
                item.verdict = self._service_verdict(item.spec, QUEUE_TIMEOUT, message, time.monotonic() - started)
            elif item.future.exception() is not None:
                message = str(item.future.exception())
                item.verdict = self._service_verdict(item.spec, INTERNAL_ERROR, message, time.monotonic() - started)
            else:
                item.verdict = self._finished_verdict(item.spec, item.future.result(), started)

    async def _enqueue(self, payloads: list[bytes]) -> None:
        try:
            queued = await _cancellable(self._queue.enqueue(payloads, self._settings.max_queue_length))
        except _REDIS_ERRORS as exc:
            self.metrics.rejections.labels("redis").inc()
            raise RedisUnavailable(f"redis is unavailable ({exc}); retry later") from exc
        if not queued:
            self.metrics.rejections.labels("queue_full").inc()
            raise Overloaded(
                f"the queue is full (MAX_QUEUE_LENGTH={self._settings.max_queue_length}, "
                f"{len(payloads)} more submitted); retry later"
            )

    def _forget(self, keys: list[bytes]) -> None:
        for key in keys:
            self._pending.pop(key, None)

    def _finished_verdict(self, spec: JobSpec, body: bytes, started: float) -> bytes:
        if body == WORKER_DIED:
            message = f"the worker running this program died {self._settings.max_attempts} times; giving up"
            return self._service_verdict(spec, INTERNAL_ERROR, message, time.monotonic() - started)
        return body

    def _service_verdict(self, spec: JobSpec, reason: str, message: str, cost_s: float) -> bytes:
        self.metrics.service_verdicts.labels(reason).inc()
        return orjson.dumps(service_verdict(spec, reason, message, cost_s))

    def _resolve(self, replies: list[bytes]) -> None:
        for reply in replies:
            key, _, body = reply.partition(b" ")
            pending = self._pending.pop(key, None)
            if pending is not None and not pending.future.done():
                pending.future.set_result(body)

    async def _dispatch_forever(self) -> None:
        next_maintenance = 0.0
        outage_since: float | None = None
        while not self._stopping:
            try:
                self._resolve(await self._queue.pop_replies(_POP_BLOCK_S))
                if time.monotonic() >= next_maintenance:
                    await self._maintain()
                    next_maintenance = time.monotonic() + _MAINTENANCE_INTERVAL_S
                outage_since = None
            except _REDIS_ERRORS as exc:
                now = time.monotonic()
                if outage_since is None:
                    logger.warning("redis unavailable: %s", exc)
                    outage_since = now
                elif now - outage_since > self._settings.redis_outage_timeout:
                    self._fail_all_pending(f"redis has been unreachable for {now - outage_since:.0f} s")
                await asyncio.sleep(_RECONNECT_DELAY_S)

    async def _maintain(self) -> None:
        run_id = await self._queue.server_run_id()
        if run_id != self._run_id:
            logger.warning(
                "redis restarted (run_id %s -> %s): re-submitting %d jobs", self._run_id, run_id, len(self._pending)
            )
            if self._pending:
                # Re-submission bypasses the queue bound: these requests were already accepted.
                await self._queue.enqueue([p.payload for p in self._pending.values()], 2**62)
                self.metrics.resubmitted.inc(len(self._pending))
            self._run_id = run_id  # only now: a failed re-submission is retried on the next round
        requeued, given_up = await self._queue.reap_dead_workers(self._policy)
        if requeued or given_up:
            logger.warning("dead workers' jobs: %d re-queued, %d given up", requeued, given_up)
            self.metrics.reaped.labels("requeued").inc(requeued)
            self.metrics.reaped.labels("given_up").inc(given_up)

    def _fail_all_pending(self, message: str) -> None:
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(RedisUnavailable(message))
        self._pending.clear()
