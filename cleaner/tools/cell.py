"""Turn a model's code cell into the program the judge runs, keeping the model's own line numbers.

Three behaviours are added without moving any user line:
- the value of a final bare expression is printed (its `repr`, unless it is None or the line ends in `;`), by
  rewriting that expression in place and appending one line after the user's code;
- auto-imports: names the reference implementation's executor made available without an import
  (`AUTO_IMPORTS`), imported by statements on ONE extra first line;
- in stateful mode, earlier successful cells are replayed with their output discarded, on that same first line.
So an error line reported by the judge is shifted by exactly `CellProgram.line_offset` (0 or 1). A
`from __future__` import at the top of the cell, which must stay the first statement of the file, is moved
onto the first line and its own line left as `pass`.
"""

from __future__ import annotations

import ast
import base64
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_RESULT_NAME = "__cleaner_last_value__"

# Replays earlier cells in the program's globals with stdout/stderr discarded. It is base64-encoded so that the
# whole replay fits on one line before the user's code.
_REPLAY_TEMPLATE = """\
import base64 as __cleaner_b64, contextlib as __cleaner_ctx, io as __cleaner_io
with __cleaner_ctx.redirect_stdout(__cleaner_io.StringIO()), __cleaner_ctx.redirect_stderr(__cleaner_io.StringIO()):
    for __cleaner_index, __cleaner_cell in enumerate({cells!r}):
        exec(compile(__cleaner_b64.b64decode(__cleaner_cell).decode(), "<earlier cell %d>" % (__cleaner_index + 1),
                     "exec"), globals())
del __cleaner_b64, __cleaner_ctx, __cleaner_io, __cleaner_index, __cleaner_cell
"""


@dataclass(frozen=True)
class AutoImports:
    """Names a program gets without importing them."""

    always: tuple[str, ...] = ()  # import statements run before every program
    on_use: tuple[tuple[str, str], ...] = ()  # (name, import statement): run when the code names `name`
    postponed_annotations: bool = False  # `from __future__ import annotations`: annotations are not evaluated

    def statements(self, sources: Iterable[str]) -> list[str]:
        """The import statements for a program made of `sources` (the cell and the cells it replays)."""
        used: set[str] = set()
        for source in sources:
            used |= names_in(source)
        return [*self.always, *dict.fromkeys(statement for name, statement in self.on_use if name in used)]


# What the reference implementation's code-judge and Python tool put in a program's namespace:
# - `reference`: a tool call. The tool base64-wraps the cell in an executor script and runs it with that
#   script's globals, so the cell sees the judge's `from typing import *` (and postponed annotations) plus the
#   executor's own imports. The judge's name-triggered imports (below) look at the wrapper, not at the cell, so
#   `math` or `np` are NOT available in a reference tool call.
# - `reference_judge`: a program sent straight to the reference judge (the code reward's tests): `typing`'s
#   names always, and math / itertools / collections / numpy / sympy when the program names them.
AUTO_IMPORTS: dict[str, AutoImports] = {
    "none": AutoImports(),
    "reference": AutoImports(
        always=(
            "from typing import *",
            "import os, sys, base64, ast, traceback, linecache",
            "from types import CodeType",
            "from contextlib import redirect_stdout, redirect_stderr",
            "from io import StringIO",
        ),
        postponed_annotations=True,
    ),
    "reference_judge": AutoImports(
        always=("from typing import *",),
        on_use=(
            ("math", "import math"),
            ("itertools", "import itertools"),
            ("collections", "import collections"),
            ("np", "import numpy as np"),
            ("numpy", "import numpy"),
            ("sp", "import sympy as sp"),
            ("sympy", "import sympy"),
            ("symbols", "from sympy import symbols"),
        ),
        postponed_annotations=True,
    ),
}


def auto_imports(name: str) -> AutoImports:
    if name not in AUTO_IMPORTS:
        raise ValueError(f"auto_imports must be one of {sorted(AUTO_IMPORTS)}, got {name!r}")
    return AUTO_IMPORTS[name]


def names_in(source: str) -> set[str]:
    """Every plain name a program mentions (read or written), as the reference judge looked for them."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()  # the judge reports the syntax error; nothing to import for it
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def hoist_future_imports(code: str) -> tuple[list[str], str]:
    """The features of the `from __future__` imports that open `code`, and `code` with each replaced by `pass`.

    Python accepts them only at the beginning of a file (after a docstring); once something is put before the
    cell they must move there. Line numbers do not change. Code that does not parse is returned unchanged.
    """
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return [], code
    leading = body[1:] if body and _is_docstring(body[0]) else body
    futures = []
    for node in leading:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            break
        futures.append(node)
    if not futures:
        return [], code
    lines = [line.encode() for line in code.splitlines(keepends=True)]
    for node in reversed(futures):  # later statements first, so earlier offsets stay valid
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            lines[first] = lines[first][: node.col_offset] + b"pass" + lines[first][node.end_col_offset :]
            continue
        lines[last] = b"pass" + lines[last][node.end_col_offset :]
        for middle in range(first + 1, last):
            lines[middle] = b"\n"
        lines[first] = lines[first][: node.col_offset].rstrip() + b"\n"
    features = [alias.name for node in futures for alias in node.names]
    return features, b"".join(lines).decode()


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def with_first_line(code: str, statements: Sequence[str], postponed_annotations: bool = False) -> tuple[str, int]:
    """`code` behind one extra first line that runs `statements` (and the cell's own future imports, moved there),
    and how many lines were added (0 when there is nothing to add)."""
    if not statements and not postponed_annotations:
        return code, 0
    features, code = hoist_future_imports(code)
    if postponed_annotations and "annotations" not in features:
        features.append("annotations")
    future = [f"from __future__ import {', '.join(features)}"] if features else []
    return "; ".join([*future, *statements]) + "\n" + code, 1


@dataclass(frozen=True)
class CellProgram:
    source: str  # what the judge runs
    line_offset: int  # judge line - line_offset = the model's line


def echo_last_expression(code: str) -> str:
    """`code` with its final top-level expression's value printed; unchanged when there is none or it won't parse."""
    try:
        module = ast.parse(code)
    except SyntaxError:
        return code  # the judge reports the syntax error with the model's line numbers
    if not module.body or not isinstance(module.body[-1], ast.Expr):
        return code
    node = module.body[-1]  # the statement, not its value: its span includes enclosing parentheses
    lines = code.splitlines(keepends=True)
    if lines[node.end_lineno - 1].encode()[node.end_col_offset :].lstrip().startswith(b";"):
        return code  # a trailing `;` silences the value, as in a notebook
    # ast offsets are UTF-8 byte columns; edit the end first so the start column stays valid.
    end = lines[node.end_lineno - 1].encode()
    lines[node.end_lineno - 1] = (end[: node.end_col_offset] + b")" + end[node.end_col_offset :]).decode()
    start = lines[node.lineno - 1].encode()
    prefix = f"{_RESULT_NAME} = (".encode()
    lines[node.lineno - 1] = (start[: node.col_offset] + prefix + start[node.col_offset :]).decode()
    if not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    lines.append(f"if {_RESULT_NAME} is not None: print(repr({_RESULT_NAME}))\n")
    return "".join(lines)


def build_program(
    code: str, earlier_cells: Sequence[str] = (), echo: bool = True, imports: AutoImports = AUTO_IMPORTS["none"]
) -> CellProgram:
    """The program for one call. `earlier_cells` are the model's sources of this trajectory's past successes."""
    statements = imports.statements([code, *earlier_cells])
    if earlier_cells:
        encoded = [base64.b64encode(prepared.encode()).decode() for prepared in earlier_cells]
        replay = base64.b64encode(_REPLAY_TEMPLATE.format(cells=encoded).encode()).decode()
        statements.append(f"exec(__import__('base64').b64decode({replay!r}).decode())")
    cell = echo_last_expression(code) if echo else code
    source, line_offset = with_first_line(cell, statements, imports.postponed_annotations)
    return CellProgram(source=source, line_offset=line_offset)
