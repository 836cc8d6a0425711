"""code_judge's modules import one another without a cycle (type-only imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import code_judge

PACKAGE_DIR = Path(code_judge.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's own modules that `path` imports anywhere in its source, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            target = ".".join(part for part in (base, node.module) if part)
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found & modules - {name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            cycle = visit(imported, [*path, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    return next((cycle for module in sorted(graph) if (cycle := visit(module, []))), None)


def test_no_two_modules_import_each_other_in_a_cycle():
    paths = sorted(PACKAGE_DIR.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): imported_modules(path, modules) for path in paths}
    assert "code_judge.cpp" in graph["code_judge.worker"]  # the parser sees what it should
    assert "code_judge.sandbox.sandbox" in graph["code_judge.sandbox"]  # relative imports resolved
    assert find_cycle(graph) is None


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
