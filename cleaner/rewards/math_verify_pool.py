"""math-verify in worker processes, with a hard time limit enforced from outside.

math-verify bounds its own work with `signal.alarm`, which only works on a main thread; verl calls rewards from
async workers and executor threads, where it raises instead. Each worker process runs checks on its own main
thread, so those inner limits work. A supervisor thread in the parent hands one check at a time to each idle
worker and kills (then replaces) a worker whose check outlives the hard limit, e.g. stuck in C code that no
signal interrupts. The limit counts from the moment a worker starts the check, never time spent queued.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import logging
import multiprocessing
import multiprocessing.connection
import os
import socket
import threading
import time
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

logger = logging.getLogger(__name__)

_READY = "ready"
# Slack between math-verify's own (whole-second) limits and the outside kill, so the inside limit fires first.
_KILL_GRACE_S = 1.0


class MathVerdict(str, Enum):
    EQUIVALENT = "equivalent"
    DIFFERENT = "different"
    PRED_UNPARSABLE = "pred_unparsable"  # math-verify read nothing from the prediction
    GOLD_UNPARSABLE = "gold_unparsable"  # math-verify read nothing from the ground truth
    TIMEOUT = "timeout"  # the worker outlived the hard limit and was killed
    CRASHED = "crashed"  # the worker process died during the check


class MathVerifyPoolClosed(RuntimeError):
    pass


def _boxed(answer: str) -> str:
    # Boxing makes math-verify read exactly this answer as LaTeX instead of searching free text.
    return "\\boxed{" + answer + "}"


def _worker_main(conn: Connection, inner_timeout_s: int) -> None:
    """Worker process: answer (gold, pred) requests with a MathVerdict value until the pipe closes."""
    from math_verify import parse, verify

    @lru_cache(maxsize=4096)
    def parse_gold(gold: str) -> list:
        return parse(_boxed(gold), parsing_timeout=inner_timeout_s)

    conn.send(_READY)
    while True:
        try:
            gold, pred = conn.recv()
        except EOFError:
            return
        gold_parsed = parse_gold(gold)
        pred_parsed = parse(_boxed(pred), parsing_timeout=inner_timeout_s)
        if not gold_parsed:
            verdict = MathVerdict.GOLD_UNPARSABLE
        elif not pred_parsed:
            verdict = MathVerdict.PRED_UNPARSABLE
        elif verify(gold_parsed, pred_parsed, timeout_seconds=inner_timeout_s):
            verdict = MathVerdict.EQUIVALENT
        else:
            verdict = MathVerdict.DIFFERENT
        conn.send(verdict.value)


@dataclass
class _Task:
    gold: str
    pred: str
    future: concurrent.futures.Future


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    ready: bool = False
    task: _Task | None = None
    started: float = 0.0  # time.monotonic() when the current task was sent


class MathVerifyPool:
    """`workers` processes running math-verify; `check()` is safe from any thread and any event loop."""

    def __init__(self, workers: int, timeout_s: float) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._context = multiprocessing.get_context("spawn")
        self._timeout_s = timeout_s + _KILL_GRACE_S
        # math-verify runs three limited steps (parse gold, parse prediction, verify) within timeout_s.
        self._inner_timeout_s = max(1, int(timeout_s // 3))
        self._lock = threading.Lock()
        self._queue: collections.deque[_Task] = collections.deque()
        self._closed = False
        self._close_reason = "the math-verify pool was closed before the check ran"
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_writer.setblocking(False)
        self._workers = [self._spawn() for _ in range(workers)]
        self._thread = threading.Thread(target=self._supervise, name="math-verify-supervisor", daemon=True)
        self._thread.start()

    @property
    def worker_pids(self) -> list[int | None]:
        return [worker.process.pid for worker in self._workers]

    def submit(self, gold: str, pred: str) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise MathVerifyPoolClosed(self._close_reason)
            self._queue.append(_Task(gold, pred, future))
        self._wake()
        return future

    async def check(self, gold: str, pred: str) -> MathVerdict:
        return MathVerdict(await asyncio.wrap_future(self.submit(gold, pred)))

    def close(self) -> None:
        """Stop the workers; checks not finished yet fail with MathVerifyPoolClosed. Safe to call twice."""
        with self._lock:
            self._closed = True
        if self._thread.is_alive():
            self._wake()
            self._thread.join(timeout=10)

    def _wake(self) -> None:
        try:
            self._wake_writer.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the socket buffer is full of wake-ups already: the supervisor will wake anyway

    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main, args=(child_conn, self._inner_timeout_s), name="math-verify-worker", daemon=True
        )
        process.start()
        child_conn.close()
        return _Worker(process, parent_conn)

    def _stop(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()

    def _replace(self, index: int, verdict: MathVerdict) -> None:
        worker = self._workers[index]
        self._stop(worker)
        self._workers[index] = self._spawn()
        if worker.task is not None:
            logger.warning("math-verify %s on gold=%.80r pred=%.80r", verdict.value, worker.task.gold, worker.task.pred)
            _resolve(worker.task.future, verdict.value)

    def _dispatch(self) -> None:
        idle = [worker for worker in self._workers if worker.ready and worker.task is None]
        with self._lock:
            while idle and self._queue:
                task = self._queue.popleft()
                if not task.future.set_running_or_notify_cancel():
                    continue  # the caller gave up before the check started
                worker = idle.pop()
                worker.conn.send((task.gold, task.pred))
                worker.task, worker.started = task, time.monotonic()

    def _supervise(self) -> None:
        while True:
            with self._lock:
                closed = self._closed
            if closed:
                self._shut_down()
                return
            self._dispatch()
            now = time.monotonic()
            deadlines = [w.started + self._timeout_s - now for w in self._workers if w.task is not None]
            wait_s = max(0.0, min(deadlines)) if deadlines else None
            ready = multiprocessing.connection.wait([self._wake_reader, *(w.conn for w in self._workers)], wait_s)
            for item in ready:
                if item is self._wake_reader:
                    self._wake_reader.recv(4096)
                    continue
                index = next(i for i, w in enumerate(self._workers) if w.conn is item)
                self._receive(index)
            now = time.monotonic()
            for index, worker in enumerate(self._workers):
                if worker.task is not None and now - worker.started > self._timeout_s:
                    self._replace(index, MathVerdict.TIMEOUT)

    def _receive(self, index: int) -> None:
        worker = self._workers[index]
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            if not worker.ready:
                self._give_up(f"a math-verify worker died while starting (exit code {worker.process.exitcode})")
                return
            self._replace(index, MathVerdict.CRASHED)
            return
        if message == _READY:
            worker.ready = True
        elif worker.task is not None:
            _resolve(worker.task.future, message)
            worker.task = None

    def _give_up(self, problem: str) -> None:
        # A worker that cannot even start (math-verify missing or broken) would fail again on every respawn.
        logger.error("%s; closing the math-verify pool", problem)
        with self._lock:
            self._closed = True
            self._close_reason = problem

    def _shut_down(self) -> None:
        with self._lock:
            tasks = list(self._queue)
            self._queue.clear()
        for worker in self._workers:
            if worker.task is not None:
                tasks.append(worker.task)
        for task in tasks:
            if not task.future.done():
                task.future.set_exception(MathVerifyPoolClosed(self._close_reason))
        for worker in self._workers:
            self._stop(worker)
        self._wake_reader.close()
        self._wake_writer.close()


def _resolve(future: concurrent.futures.Future, value: str) -> None:
    if not future.done():
        future.set_result(value)


_shared_pools: dict[tuple[int, float], MathVerifyPool] = {}
_shared_lock = threading.Lock()
_shared_pid = os.getpid()


def shared_math_verify_pool(workers: int, timeout_s: float) -> MathVerifyPool:
    """One pool per process and setting, started on first use and stopped at exit."""
    global _shared_pid
    with _shared_lock:
        if os.getpid() != _shared_pid:  # a forked child inherits the dict but not the supervisor threads
            _shared_pools.clear()
            _shared_pid = os.getpid()
        key = (workers, timeout_s)
        if key not in _shared_pools:
            pool = MathVerifyPool(workers, timeout_s)
            atexit.register(pool.close)
            _shared_pools[key] = pool
        return _shared_pools[key]
