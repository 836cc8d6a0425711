"""Turn a model's code cell into the program the judge runs, keeping the model's own line numbers.

Two notebook behaviours are added without moving any user line:
- the value of a final bare expression is printed (its `repr`, unless it is None or the line ends in `;`), by
  rewriting that expression in place and appending one line after the user's code;
- in stateful mode, earlier successful cells are replayed with their output discarded by ONE extra first line,
  so an error line reported by the judge is shifted by exactly `CellProgram.line_offset`.
"""

from __future__ import annotations

import ast
import base64
from collections.abc import Sequence
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


def build_program(code: str, earlier_cells: Sequence[str] = (), echo: bool = True) -> CellProgram:
    """The program for one call. `earlier_cells` are the model's sources of this trajectory's past successes."""
    cell = echo_last_expression(code) if echo else code
    if not earlier_cells:
        return CellProgram(source=cell, line_offset=0)
    encoded = [base64.b64encode(prepared.encode()).decode() for prepared in earlier_cells]
    replay = base64.b64encode(_REPLAY_TEMPLATE.format(cells=encoded).encode()).decode()
    first_line = f"exec(__import__('base64').b64decode({replay!r}).decode())\n"
    return CellProgram(source=first_line + cell, line_offset=1)
