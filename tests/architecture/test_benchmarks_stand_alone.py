"""Benchmarks run from the package alone: none imports test code (tests/ and its helpers are not installed)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# How test code is reached: `tests.…`, or `support.…` / `conftest` with tests/ put on sys.path.
TEST_MODULES = {"tests", "support", "conftest"}
TESTS_ON_PATH = re.compile(r"sys\.path\.\w+\(.*tests")


def imported_top_levels(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda path: path.name)
def test_a_benchmark_imports_nothing_from_tests(script):
    assert not imported_top_levels(script) & TEST_MODULES, f"{script.name} imports test code"
    assert not TESTS_ON_PATH.search(script.read_text(encoding="utf-8")), f"{script.name} puts tests/ on sys.path"
