"""How `make test` shares the suite between its two pytest-xdist workers (`-n 2 --dist loadfile`).

A test module runs whole on one worker, so its module fixtures (a judge service, a model server) start once.
The real trainer runs (tests/e2e and verl-cpu's stock GRPO step) count as one module: one worker runs them one
after another, so they share their session fixtures (the GRPO run that several modules read) and no two
trainers, several GB each, run at once, while the other worker takes the rest of the suite. (xdist's own
`xdist_group` mark cannot do this on pytest 9: xdist 3.8 writes the group into a node id field pytest 9 no
longer reads.)
"""

from __future__ import annotations

import pytest

TRAINER_TESTS = ("tests/e2e/", "verl-cpu/tests/test_stock_grpo_cpu.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TrainerRunsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "trainer runs" if module.startswith(TRAINER_TESTS) else module

    return TrainerRunsTogether(config, log)
