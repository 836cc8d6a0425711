"""The package stands alone next to verl: no module of it, of its tests or of its examples imports CLEANER, so
`pytest verl-cpu/tests` runs with only verl-cpu (and verl) installed."""

from __future__ import annotations

import ast
from pathlib import Path

import verl_cpu

PACKAGE = Path(verl_cpu.__file__).resolve().parent
PROJECT = PACKAGE.parent  # verl-cpu/: the package, its tests and its examples
FOREIGN = {"cleaner", "code_judge"}


def imported_modules(path: Path) -> list[str]:
    """Every absolute import of a file, at any depth (functions and fixtures import lazily)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
    return names


def test_no_module_of_the_package_its_tests_or_examples_imports_cleaner():
    files = [path for folder in (PACKAGE, PROJECT / "tests", PROJECT / "examples") for path in folder.rglob("*.py")]
    assert {path.parent.name for path in files} >= {"verl_cpu", "tests", "examples"}
    offenders = [
        f"{path.relative_to(PROJECT)}: {name}"
        for path in sorted(files)
        for name in imported_modules(path)
        if name.split(".")[0] in FOREIGN
    ]
    assert offenders == []


def test_the_scan_sees_an_import_inside_a_function(tmp_path):
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from cleaner.models.tiny_qwen2 import build_tiny_qwen2\n")
    assert imported_modules(source) == ["cleaner.models.tiny_qwen2"]
