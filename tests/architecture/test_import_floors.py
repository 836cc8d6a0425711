"""The package's floors (docs/architecture.md): verl is imported only in `cleaner/verl/` (what verl loads at run
time) and `cleaner/recipes/` (the recipes' tooling, which composes verl's config), imports go downward,
packages on one floor do not import each other in a cycle, and the verl-free floors load neither verl nor torch
nor transformers."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "cleaner"

# Floor of each top-level module or subpackage of `cleaner`; a module may import its own floor and below.
FLOORS: dict[str, int] = {
    "names": 0,
    "source_kinds": 0,
    "resources": 0,
    "saar": 1,
    "purify": 1,
    "trajectory": 2,
    "tools": 3,
    "rewards": 3,
    "data": 3,
    "analysis": 3,
    "verl": 4,
    "rollout": 5,
    "evaluation": 5,
    "report": 5,
    "models": 5,
    "recipes": 5,
    "cli": 6,
}
# The parts that may import verl: what verl loads at run time, and the recipes' config tooling.
VERL_IMPORTERS = ("verl", "recipes")
VERL_FREE_FLOORS = (0, 1, 2, 3)
# What importing a verl-free floor must leave out of the process.
HEAVY = ("verl", "torch", "transformers")
VERL_IMPORT = re.compile(r"^\s*(import verl\b|from verl[\s.])", re.MULTILINE)


def source_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def part_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def module_name(path: Path) -> str:
    parts = ["cleaner", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_cleaner_parts(path: Path) -> set[str]:
    """The top-level parts of `cleaner` that `path` imports (absolute or relative imports, anywhere in the file)."""
    package = module_name(path).split(".") if path.name == "__init__.py" else module_name(path).split(".")[:-1]
    parts = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                names = [".".join([*base, node.module] if node.module else base)]
            else:
                names = [node.module or ""]
            if names == ["cleaner"]:  # `from cleaner import x`
                names = [f"cleaner.{alias.name}" for alias in node.names]
        else:
            continue
        parts.update(name.split(".")[1] for name in names if name.startswith("cleaner.") and name.count(".") >= 1)
    return parts


def test_every_part_of_the_package_has_a_floor():
    unknown = sorted({part_of(path) for path in source_files()} - set(FLOORS) - {"__init__"})
    assert not unknown, f"add {unknown} to FLOORS here and to docs/architecture.md"


def test_verl_is_imported_only_in_cleaner_verl_and_the_recipe_tooling():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}: {match.group(1).strip()}"
        for path in source_files()
        if part_of(path) not in VERL_IMPORTERS
        for match in VERL_IMPORT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "verl imported outside cleaner/verl/ and cleaner/recipes/:\n" + "\n".join(offenders)


def test_imports_only_go_down_the_floors():
    upward = []
    for path in source_files():
        own = part_of(path)
        if own == "__init__":
            continue
        for imported in imported_cleaner_parts(path):
            if FLOORS[imported] > FLOORS[own]:
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)} (floor {FLOORS[own]}) imports cleaner.{imported} (floor {FLOORS[imported]})"
                )
    assert not upward, "imports going up the floors:\n" + "\n".join(upward)


def part_graph() -> dict[str, set[str]]:
    """Which other parts of `cleaner` each part imports."""
    graph: dict[str, set[str]] = {part: set() for part in FLOORS}
    for path in source_files():
        own = part_of(path)
        if own != "__init__":
            graph[own] |= imported_cleaner_parts(path) - {own}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as [a, b, ..., a], or None."""
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> list[str] | None:
        if node in stack:
            return [*stack[stack.index(node) :], node]
        if node in done:
            return None
        for child in sorted(graph[node]):
            if cycle := visit(child, [*stack, node]):
                return cycle
        done.add(node)
        return None

    for node in sorted(graph):
        if cycle := visit(node, []):
            return cycle
    return None


def test_find_cycle_finds_a_cycle_on_one_floor_and_none_in_a_chain():
    assert find_cycle({"rollout": {"report"}, "report": {"models"}, "models": {"rollout"}}) == [
        "models",
        "rollout",
        "report",
        "models",
    ]
    assert (
        find_cycle(
            {"rollout": {"models", "trajectory"}, "report": {"trajectory"}, "models": set(), "trajectory": set()}
        )
        is None
    )


def test_packages_on_one_floor_do_not_import_each_other_in_a_cycle():
    cycle = find_cycle(part_graph())
    assert cycle is None, "import cycle between packages: " + " -> ".join(f"cleaner.{part}" for part in cycle)


@pytest.mark.parametrize("part", [part for part, floor in FLOORS.items() if floor in VERL_FREE_FLOORS])
def test_verl_free_floors_do_not_load_verl(part):
    """Importing every module of a verl-free floor leaves verl, torch and transformers out of the process."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"root = importlib.import_module('cleaner.{part}')\n"
        "for module in pkgutil.walk_packages(getattr(root, '__path__', []), root.__name__ + '.'):\n"
        "    importlib.import_module(module.name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"cleaner.{part} loads {result.stdout.strip()}"


@pytest.mark.parametrize("package", ["code-judge/code_judge", "verl-cpu/verl_cpu"])
def test_the_packages_beside_cleaner_import_nothing_of_it(package):
    """code-judge is reached over HTTP only; verl-cpu plugs into verl alone. Neither may lean on `cleaner`."""
    root = PACKAGE.parent / package
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(root.rglob("*.py"))
        if "__pycache__" not in path.parts and imports_cleaner(path)
    ]
    assert not offenders, f"{package} imports cleaner: {offenders}"


def imports_cleaner(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "cleaner" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "cleaner":
            return True
    return False
