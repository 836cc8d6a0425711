"""The worker group's supervision, with a sandbox that cannot start (real processes, real Redis)."""

from __future__ import annotations

import logging
import threading
import time

from code_judge.settings import JudgeSettings
from code_judge.worker import WorkerGroup


class BrokenSandbox:
    mode = "broken"

    def __init__(self) -> None:
        raise RuntimeError("this sandbox never starts")


def test_workers_that_die_at_start_are_respawned_with_backoff(redis_process, caplog):
    group = WorkerGroup(JudgeSettings(redis_uri=redis_process.uri), 1, BrokenSandbox, BrokenSandbox.mode)
    caplog.set_level(logging.WARNING, logger="code_judge.worker")
    group.start()
    supervisor = threading.Thread(target=group.supervise)
    supervisor.start()
    try:
        time.sleep(6)
    finally:
        group.stop(grace_s=5)
        supervisor.join(timeout=5)
    delays = [r.args[-1] for r in caplog.records if "replacing it in" in r.getMessage()]
    # Each spawn takes ~1 s here (a fresh interpreter); without backoff there would be one every ~1 s.
    assert 2 <= len(delays) <= 4
    assert delays == sorted(delays) and delays[0] == 0.5 and delays[1] == 1.0
    assert not supervisor.is_alive()
