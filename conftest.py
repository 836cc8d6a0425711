"""How `make test` shares the suite between its two pytest-xdist workers (`-n 2 --dist loadfile
--no-loadscope-reorder`).

A test module runs whole on one worker, so its module fixtures (a judge service, a model server) start once.
The real trainer runs (tests/e2e and verl-cpu's stock GRPO step) count as one module: one worker runs them one
after another, so they share their session fixtures (the GRPO run that several modules read) and no two
trainers, several GB each, run at once. Modules are handed out heaviest first (the trainer runs, then the modules
with `slow` or `real_model` tests, then the rest, each in collection order), so the last ones handed out are
short and neither worker is left with a long tail. (xdist's own `xdist_group` mark cannot group modules on
pytest 9: xdist 3.8 writes the group into a node id field pytest 9 no longer reads.)
"""

from __future__ import annotations

import pytest

TRAINER_TESTS = ("tests/e2e/", "verl-cpu/tests/test_stock_grpo_cpu.py")
TRAINER_RUNS = "trainer runs"
HEAVY_MARKS = ("slow", "real_model")


def work_unit(nodeid: str) -> str:
    """What one worker runs whole: the test's module, or all the trainer runs together."""
    module = nodeid.split("::", 1)[0]
    return TRAINER_RUNS if module.startswith(TRAINER_TESTS) else module


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has marked the tiers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    weight: dict[str, int] = {}
    for item in items:
        unit = work_unit(item.nodeid)
        heavy = 2 if unit == TRAINER_RUNS else int(any(item.get_closest_marker(mark) for mark in HEAVY_MARKS))
        weight[unit] = max(weight.get(unit, 0), heavy)
    items.sort(key=lambda item: -weight[work_unit(item.nodeid)])  # stable: collection order within a weight


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TrainerRunsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return TrainerRunsTogether(config, log)
