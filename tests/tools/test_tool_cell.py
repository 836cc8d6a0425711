"""Notebook semantics of a cell: the last expression is echoed, replay is silent, line numbers stay the model's."""

from __future__ import annotations

import contextlib
import io
import traceback

import pytest

from cleaner.tools.cell import build_program, echo_last_expression


def run(source: str) -> tuple[str, int | None]:
    """Run like the judge does (as __main__ from a file path); return stdout and the line of an uncaught error."""
    out = io.StringIO()
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        try:
            exec(compile(source, "solution.py", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 - the error's line is what the test checks
            frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == "solution.py"]
            return out.getvalue(), frames[-1].lineno
    return out.getvalue(), None


@pytest.mark.parametrize(
    ("code", "stdout"),
    [
        ("x = 3\nx * 2", "6\n"),
        ("'text'", "'text'\n"),
        ("print(1)", "1\n"),  # None is not echoed
        ("a = [1]; a  # trailing comment", "[1]\n"),
        ("é = 'ü'\n(é +\n é)", "'üü'\n"),
        ("x = 1", ""),
        ("x = 1\nx;", ""),  # a trailing semicolon silences the value
        ("for i in range(2):\n    i", ""),  # only a top-level final expression is shown
    ],
)
def test_last_expression_is_echoed(code, stdout):
    assert run(echo_last_expression(code))[0] == stdout


def test_code_that_does_not_parse_is_left_for_the_judge():
    assert echo_last_expression("if x\n  y") == "if x\n  y"


@pytest.mark.parametrize("code", ["a = 1\n\nb = a +\\\n  c\nb", "x = 1\n(x +\n y)", "1\n2 / 0"])
def test_error_lines_are_unchanged_by_the_echo(code):
    expected = run(code)[1]
    assert expected is not None
    assert run(echo_last_expression(code))[1] == expected


def test_stateful_program_replays_quietly_with_one_line_offset():
    program = build_program("print(total)\nundefined", earlier_cells=["total = 5\nprint('noise')", "total += 1\ntotal"])
    assert program.line_offset == 1
    stdout, line = run(program.source)
    assert stdout == "6\n"
    assert line - program.line_offset == 2


def test_without_history_the_program_is_the_echoed_cell():
    program = build_program("1 + 1")
    assert (program.line_offset, run(program.source)[0]) == (0, "2\n")
    assert build_program("1 + 1", echo=False).source == "1 + 1"
