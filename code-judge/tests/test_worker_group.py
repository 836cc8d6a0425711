"""Workers: how one handles a job (small fake sandbox), and the group's supervision (real processes and Redis)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from judge_harness import wait_until

from code_judge.execution import ExecutionResult
from code_judge.settings import JudgeSettings
from code_judge.worker import Slot, WorkerGroup


@contextmanager
def supervised(group: WorkerGroup) -> Iterator[threading.Thread]:
    """The group's workers started and supervised by a thread; all stopped on leaving."""
    group.start()
    supervisor = threading.Thread(target=group.supervise)
    supervisor.start()
    try:
        yield supervisor
    finally:
        group.stop(grace_s=5)
        supervisor.join(timeout=5)


class BrokenSandbox:
    mode = "broken"

    def __init__(self) -> None:
        raise RuntimeError("this sandbox never starts")


def test_workers_that_die_at_start_are_respawned_with_backoff(redis_process, caplog):
    group = WorkerGroup(JudgeSettings(redis_uri=redis_process.uri), 1, BrokenSandbox, BrokenSandbox.mode)
    caplog.set_level(logging.WARNING, logger="code_judge.worker")

    def delays() -> list[float]:
        return [r.args[-1] for r in caplog.records if "replacing it in" in r.getMessage()]

    with supervised(group) as supervisor:
        wait_until(lambda: len(delays()) >= 3, 60, "three failed starts")
    assert delays()[:3] == [0.5, 1.0, 2.0]  # not a tight loop
    assert not supervisor.is_alive()


class RecordingSandbox:
    mode = "recording"

    def __init__(self) -> None:
        self.sources: list[str] = []

    def run(self, source, stdin, limits, on_long=None):
        self.sources.append(source)
        return ExecutionResult(0, None, stdin, "", False, False, 0.01, None, None)

    def close(self) -> None:
        pass


def job(deadline: float, **changes) -> bytes:
    fields = dict(id="j1", reply="r", sub_id=3, code="print(input())", stdin="hi\n", expected="hi")
    fields.update(changes, with_output=True, deadline=deadline)
    return json.dumps(fields).encode()


def test_worker_skips_jobs_whose_client_stopped_waiting():
    sandbox = RecordingSandbox()
    slot = Slot(queue=None, sandbox=sandbox, settings=JudgeSettings(), short_slots=threading.Semaphore(1))
    assert slot.handle(job(deadline=time.time() - 1)) is None
    assert sandbox.sources == []
    reply_key, message = slot.handle(job(deadline=time.time() + 60))
    job_id, _, body = message.partition(b" ")
    verdict = json.loads(body)
    assert (reply_key, job_id) == ("r", b"j1")
    assert verdict["sub_id"] == 3 and verdict["success"] is True and verdict["stdout"] == "hi\n"
    assert sandbox.sources == ["print(input())"]


class SandboxThatCannotStartZygotes:
    mode = "unstartable"

    def run(self, source, stdin, limits, on_long=None):
        from code_judge.sandbox import SandboxUnavailable

        raise SandboxUnavailable("no zygote can start here")

    def close(self) -> None:
        pass


async def test_a_job_whose_slot_fails_is_rerun_then_answered_not_lost(redis_process):
    from code_judge.metrics import ApiMetrics
    from code_judge.schemas import Submission
    from code_judge.service import JudgeService

    settings = JudgeSettings(redis_uri=redis_process.uri, max_attempts=2)
    service = JudgeService(settings, ApiMetrics())
    await service.start()
    group = WorkerGroup(settings, 1, SandboxThatCannotStartZygotes, SandboxThatCannotStartZygotes.mode)
    try:
        with supervised(group):
            (verdict,) = await service.submit([Submission(type="python", solution="print(1)")], True, timeout_s=60)
    finally:
        await service.stop()
    answer = json.loads(verdict)
    assert answer["reason"] == "internal_error" and "died 2 times" in answer["stderr"]
