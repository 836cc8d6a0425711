"""How `make test` shares the suite between its two pytest-xdist workers (`-n 2 --dist loadgroup`).

A test module runs whole on one worker, so its module fixtures (a judge service, a model server) start once.
The real trainer runs (tests/e2e and verl-cpu's stock GRPO step) form one group: one worker runs them one after
another, so they share their session fixtures (the GRPO run that several modules read) and no two trainers,
several GB each, run at once, while the other worker takes the rest of the suite.
"""

from __future__ import annotations

import pytest

TRAINER_GROUP = "trainer"
TRAINER_TESTS = ("tests/e2e/", "verl-cpu/tests/test_stock_grpo_cpu.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(TRAINER_GROUP if module.startswith(TRAINER_TESTS) else module))
