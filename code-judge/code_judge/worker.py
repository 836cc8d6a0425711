"""Workers: processes that lease jobs from Redis, run them in a sandbox and reply; and the group that keeps N alive.

A worker process runs up to `worker_slots` programs at once, one per slot thread, all in one Sandbox (a pool of
warm zygotes). At most `worker_short_slots` of them may be young: a slot needs a short-slot token to lease a job,
and gives it back once its run has gone on for `demote_after` seconds. So a program that sleeps or loops holds a
slot but not the short slot, and the worker keeps taking short programs while it runs.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import redis

from code_judge.cpp import run_cpp
from code_judge.execution import SandboxLike
from code_judge.process import die_with_parent
from code_judge.queue import QueueKeys, ReapPolicy, WorkerQueue, connect_sync, new_worker_id, reap_sync
from code_judge.sandbox.errors import SandboxUnavailable
from code_judge.settings import JudgeSettings
from code_judge.verdict import INTERNAL_ERROR, JobSpec, execution_verdict, service_verdict

logger = logging.getLogger(__name__)

_TAKE_BLOCK_S = 1.0  # how often an idle slot looks at its stop flag
_SUPERVISE_INTERVAL_S = 0.5
_STABLE_AFTER_S = 10.0  # a worker that dies sooner counts as failing to start
_MAX_RESPAWN_DELAY_S = 30.0
_REDIS_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)


SandboxFactory = Callable[[], SandboxLike]


@dataclass
class _Delivery:
    job: bytes  # as leased, to drop the lease
    reply_key: str | None  # None: nothing to deliver (the client stopped waiting)
    message: bytes | None


class Slot:
    """Runs leased jobs one at a time; a finished verdict is delivered before anything else happens."""

    def __init__(
        self, queue: WorkerQueue, sandbox: SandboxLike, settings: JudgeSettings, short_slots: threading.Semaphore
    ):
        self._queue = queue
        self._sandbox = sandbox
        self._settings = settings
        self._limits = settings.limits
        self._cpp = settings.cpp
        self._short_slots = short_slots
        self._holds_short_slot = False

    def handle(self, raw: bytes) -> tuple[str, bytes] | None:
        """Run one job; (reply key, reply message), or None for a job whose client has stopped waiting."""
        job = orjson.loads(raw)
        if job["deadline"] < time.time():
            logger.info("skipping job %s: its client stopped waiting", job["id"])
            return None
        spec = JobSpec(
            sub_id=job["sub_id"],
            expected_output=job["expected"],
            with_output=job["with_output"],
            max_output_chars=self._settings.max_stdout_error_length,
        )
        try:
            if job.get("type") == "cpp":
                result = run_cpp(
                    self._sandbox, self._cpp, job["code"], job["stdin"], self._limits, on_long=self._leave_short_slot
                )
            else:
                result = self._sandbox.run(job["code"], job["stdin"], self._limits, on_long=self._leave_short_slot)
        except Exception as exc:
            if isinstance(exc, SandboxUnavailable):
                raise  # no zygote can start: the worker stops and its group restarts it (see _serve_slot)
            # This run's zygote failed (the sandbox already dropped it): answer the client.
            logger.exception("sandbox failed on job %s", job["id"])
            verdict = service_verdict(spec, INTERNAL_ERROR, f"sandbox failure: {type(exc).__name__}: {exc}", 0.0)
        else:
            verdict = execution_verdict(spec, result)
        return job["reply"], job["id"].encode() + b" " + orjson.dumps(verdict)

    def serve(self, stop: threading.Event) -> None:
        job: bytes | None = None  # leased, not yet run
        delivery: _Delivery | None = None
        failures = 0
        while not stop.is_set():
            try:
                if delivery is not None:
                    job = self._deliver(delivery, take_next=self._holds_short_slot)
                    delivery = None
                elif job is not None:
                    answer = self.handle(job)
                    delivery = _Delivery(job, *(answer or (None, None)))
                    job = None
                elif self._enter_short_slot():
                    job = self._queue.take(_TAKE_BLOCK_S)
                failures = 0
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                delay = _REDIS_BACKOFF_S[min(failures, len(_REDIS_BACKOFF_S) - 1)]
                failures += 1
                logger.warning("redis unavailable (%s); retrying in %.1f s", exc, delay)
                stop.wait(delay)
        # A job leased but not run stays leased: the worker gives all of them back once every slot has stopped.
        if delivery is not None:
            try:
                self._deliver(delivery, take_next=False)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                # Still leased, so it is given back and run again: the verdict is computed twice, none is lost.
                logger.warning("could not deliver a verdict at shutdown: %s", exc)
        self._leave_short_slot()

    def _deliver(self, delivery: _Delivery, take_next: bool) -> bytes | None:
        return self._queue.finish(delivery.job, delivery.reply_key, delivery.message, take_next)

    def _enter_short_slot(self) -> bool:
        if not self._holds_short_slot:
            self._holds_short_slot = self._short_slots.acquire(timeout=_TAKE_BLOCK_S)
        return self._holds_short_slot

    def _leave_short_slot(self) -> None:
        if self._holds_short_slot:
            self._holds_short_slot = False
            self._short_slots.release()


def _heartbeat_loop(queue: WorkerQueue, interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s):
        try:
            queue.heartbeat()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            logger.warning("heartbeat failed: %s", exc)


def _serve_slot(slot: Slot, stop: threading.Event, failed: threading.Event) -> None:
    try:
        slot.serve(stop)
    except Exception:
        # The whole worker stops and exits non-zero, so its group reaps it: the job this slot held is re-queued
        # (or, once it has been leased by MAX_ATTEMPTS workers that failed, answered `internal_error`).
        logger.exception("a slot failed; stopping this worker")
        failed.set()
        stop.set()


def worker_process_main(settings: JudgeSettings, worker_id: str, sandbox_factory: SandboxFactory) -> None:
    """Entry point of one worker process: `settings.worker_slots` slot threads sharing one sandbox."""
    die_with_parent()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s worker {os.getpid()}: %(message)s")
    stop, failed = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    assert settings.redis_uri is not None
    client = connect_sync(settings.redis_uri, settings.redis_socket_timeout)
    queue = WorkerQueue(client, QueueKeys(settings.redis_key_prefix), worker_id, settings.redis_result_expire)
    sandbox = sandbox_factory()
    short_slots = threading.Semaphore(settings.worker_short_slots)
    queue.heartbeat()  # registered only once its sandbox is warm
    beat = threading.Thread(target=_heartbeat_loop, args=(queue, settings.worker_heartbeat_interval, stop), daemon=True)
    beat.start()
    threads = [
        threading.Thread(target=_serve_slot, args=(Slot(queue, sandbox, settings, short_slots), stop, failed))
        for _ in range(settings.worker_slots)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=1.0)  # a timed join keeps the main thread responsive to signals
    if not failed.is_set():
        _hand_back(queue)
    sandbox.close()
    client.close()
    if failed.is_set():
        sys.exit(1)


def _hand_back(queue: WorkerQueue) -> None:
    """Clean shutdown: return the jobs leased but never run, and deregister."""
    try:
        returned = queue.give_back()
        queue.deregister()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # The leases stay in Redis; the reaper re-queues them once this worker's heartbeat is stale.
        logger.warning("could not hand back work at shutdown: %s", exc)
        return
    if returned:
        logger.info("gave back %d leased jobs", returned)


@dataclass
class _Child:
    worker_id: str
    process: multiprocessing.process.BaseProcess
    started_at: float
    respawn_at: float | None = None  # set once it has died and been reaped


class WorkerGroup:
    """Keeps `count` worker processes alive; a dead worker's leased jobs are re-queued at once.

    Workers that keep dying right after they start (a sandbox that cannot come up, say) are respawned with
    exponential backoff instead of in a tight loop.
    """

    def __init__(self, settings: JudgeSettings, count: int, sandbox_factory: SandboxFactory, sandbox_mode: str):
        if settings.redis_uri is None:
            raise ValueError("WorkerGroup needs settings.redis_uri")
        self._settings = settings
        self._count = count
        self._factory = sandbox_factory
        self._mode = sandbox_mode
        self._context = multiprocessing.get_context("spawn")
        self._children: list[_Child] = []
        self._quick_deaths = 0
        self._stop = threading.Event()
        self._client = connect_sync(settings.redis_uri, settings.redis_socket_timeout)
        self._keys = QueueKeys(settings.redis_key_prefix)
        self._policy = ReapPolicy(
            settings.worker_heartbeat_timeout, settings.max_attempts, settings.redis_result_expire
        )

    @property
    def pids(self) -> list[int]:
        return [c.process.pid for c in self._children if c.process.pid is not None and c.respawn_at is None]

    def _spawn(self) -> _Child:
        worker_id = new_worker_id(self._mode)
        process = self._context.Process(
            target=worker_process_main, args=(self._settings, worker_id, self._factory), name=f"judge-{worker_id}"
        )
        process.start()
        return _Child(worker_id, process, time.monotonic())

    def start(self) -> None:
        self._children = [self._spawn() for _ in range(self._count)]

    def supervise(self, tick: Callable[[], object] | None = None) -> None:
        """Block until stop(): replace dead workers (after re-queueing their leases); call `tick` twice a second."""
        while not self._stop.is_set():
            if tick is not None:
                tick()
            now = time.monotonic()
            live = [c.process.sentinel for c in self._children if c.respawn_at is None]
            respawns = [c.respawn_at for c in self._children if c.respawn_at is not None]
            multiprocessing.connection.wait(live, timeout=min([_SUPERVISE_INTERVAL_S, *(t - now for t in respawns)]))
            if self._stop.is_set():
                break
            for index, child in enumerate(self._children):
                if child.respawn_at is None and not child.process.is_alive():
                    self._reap(child.worker_id)
                    child.respawn_at = time.monotonic() + self._respawn_delay(child)
                if child.respawn_at is not None and time.monotonic() >= child.respawn_at:
                    self._children[index] = self._spawn()

    def _respawn_delay(self, child: _Child) -> float:
        lifetime = time.monotonic() - child.started_at
        self._quick_deaths = self._quick_deaths + 1 if lifetime < _STABLE_AFTER_S else 0
        delay = 0.0 if self._quick_deaths == 0 else min(_MAX_RESPAWN_DELAY_S, 0.5 * 2 ** (self._quick_deaths - 1))
        logger.warning(
            "worker %s exited with %s after %.1f s; replacing it in %.1f s",
            child.worker_id,
            child.process.exitcode,
            lifetime,
            delay,
        )
        return delay

    def _reap(self, worker_id: str) -> None:
        try:
            requeued, given_up = reap_sync(self._client, self._keys, self._policy, worker_id)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Left to the API's periodic reaper, which sees the stale heartbeat.
            logger.warning("could not reap worker %s now: %s", worker_id, exc)
            return
        if requeued or given_up:
            logger.warning("worker %s died holding jobs: %d re-queued, %d given up", worker_id, requeued, given_up)

    def stop(self, grace_s: float) -> None:
        self._stop.set()
        for child in self._children:
            if child.respawn_at is None and child.process.is_alive():
                child.process.terminate()
        deadline = time.monotonic() + grace_s
        for child in self._children:
            child.process.join(max(0.0, deadline - time.monotonic()))
            if child.process.is_alive():
                child.process.kill()
                child.process.join()
                self._reap(child.worker_id)
        self._client.close()
