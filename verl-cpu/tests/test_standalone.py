"""The package stands alone next to verl: no module of it imports CLEANER."""

from __future__ import annotations

import ast
from pathlib import Path

import verl_cpu

PACKAGE = Path(verl_cpu.__file__).resolve().parent


def test_no_module_of_the_package_imports_cleaner():
    offenders = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [f"{path.name}: {name}" for name in names if name.split(".")[0] in {"cleaner", "code_judge"}]
    assert offenders == []
