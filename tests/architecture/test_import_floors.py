"""The package's floors (docs/architecture.md): verl is imported only in `cleaner/verl/`, and imports go downward."""

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
    "trajectory": 2,
    "tools": 3,
    "rewards": 3,
    "data": 3,
    "verl": 4,
    "rollout": 5,
    "evaluation": 5,
    "report": 5,
    "models": 5,
    "cli": 6,
    # Public paths recipes and docs name, kept as aliases of their cleaner.verl modules.
    "plugin": 6,
    "agent_loop": 6,
    "agent_loop_manager": 6,
}
VERL_FREE_FLOORS = (0, 1, 2, 3)
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


def test_verl_is_imported_only_in_cleaner_verl():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}: {match.group(1).strip()}"
        for path in source_files()
        if part_of(path) != "verl"
        for match in VERL_IMPORT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "verl imported outside cleaner/verl/:\n" + "\n".join(offenders)


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


@pytest.mark.parametrize("part", [part for part, floor in FLOORS.items() if floor in VERL_FREE_FLOORS])
def test_verl_free_floors_do_not_load_verl(part):
    """Importing every module of a verl-free floor leaves verl (and torch) out of the process."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"root = importlib.import_module('cleaner.{part}')\n"
        "for module in pkgutil.walk_packages(getattr(root, '__path__', []), root.__name__ + '.'):\n"
        "    importlib.import_module(module.name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'verl', 'torch'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"cleaner.{part} loads {result.stdout.strip()}"
