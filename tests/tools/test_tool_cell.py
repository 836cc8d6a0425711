"""Notebook semantics of a cell: the last expression is echoed, replay is silent, line numbers stay the model's."""

from __future__ import annotations

import contextlib
import io
import traceback

import pytest

from cleaner.tools.cell import AUTO_IMPORTS, build_program, echo_last_expression, hoist_future_imports


def run(source: str) -> tuple[str, int | None]:
    """Run like the judge does (as __main__ from a file path); return stdout and the line of an uncaught error."""
    out = io.StringIO()
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(out):
        try:
            # dont_inherit: this test module's own `from __future__ import annotations` must not leak in
            exec(compile(source, "solution.py", "exec", dont_inherit=True), namespace)
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


REFERENCE = AUTO_IMPORTS["reference"]
REFERENCE_JUDGE = AUTO_IMPORTS["reference_judge"]


def test_a_reference_tool_call_sees_typing_and_the_executors_modules_but_not_math():
    """The reference wraps a tool call in an executor script: typing's names (from its judge) and the script's own
    imports are there; the judge's name-triggered imports see the wrapper, not the cell, so `math` is not."""
    program = build_program(
        "def f(xs: List[int]) -> Optional[int]:\n    return max(xs)\nsys.maxsize > f([1, 2])", imports=REFERENCE
    )
    assert run(program.source) == ("True\n", None)
    stdout, line = run(build_program("x = 1\nmath.sqrt(2)", imports=REFERENCE).source)
    assert line == 3  # NameError on the model's line 2, one line below the prelude


@pytest.mark.parametrize(
    ("code", "stdout"),
    [
        ("math.sqrt(16)", "4.0\n"),
        ("int(np.arange(3).sum())", "3\n"),
        ("x = symbols('x')\nsp.expand((x + 1) ** 2)", "x**2 + 2*x + 1\n"),
        ("collections.Counter('aab')['a'] + len(list(itertools.permutations('ab')))", "4\n"),
        ("Dict.__name__", "'Dict'\n"),
    ],
)
def test_a_program_sent_straight_to_the_reference_judge_sees_the_names_it_uses(code, stdout):
    assert run(build_program(code, imports=REFERENCE_JUDGE).source) == (stdout, None)


def test_name_triggered_imports_are_added_only_for_names_the_program_uses():
    source = build_program("math.pi", imports=REFERENCE_JUDGE).source.splitlines()[0]
    assert "import math" in source and "numpy" not in source and "sympy" not in source


def test_no_auto_imports_leaves_the_cell_alone():
    assert build_program("1 + 1", echo=False, imports=AUTO_IMPORTS["none"]).source == "1 + 1"
    assert run(build_program("List", imports=AUTO_IMPORTS["none"]).source)[1] == 1


@pytest.mark.parametrize("preset", ["reference", "reference_judge"])
@pytest.mark.parametrize(
    "code",
    [
        "a = 1\n\nb = a +\\\n  c\nb",
        "x = 1\n(x +\n y)",
        "1\n2 / 0",
        "import math\nmath.sqrt(-1)",
        '"""doc"""\nfrom __future__ import annotations\n1 / 0',
    ],
)
def test_error_lines_stay_the_models_own_with_auto_imports(preset, code):
    expected = run(code)[1]
    program = build_program(code, imports=AUTO_IMPORTS[preset])
    assert run(program.source)[1] - program.line_offset == expected


def test_annotations_are_postponed_as_in_the_reference():
    code = (
        "class Node:\n    def merge(self, other: Node) -> Node:\n        return self\nNode().merge(Node()) is not None"
    )
    assert run(build_program(code, imports=REFERENCE).source) == ("True\n", None)
    assert run(build_program(code, imports=AUTO_IMPORTS["none"]).source)[1] == 2  # NameError without it


@pytest.mark.parametrize(
    "code",
    [
        "from __future__ import annotations\nx: Undefined = 1\nx",
        '"""A docstring."""\nfrom __future__ import annotations\nx: Undefined = 1\nx',
        "from __future__ import annotations; x: Undefined = 1\nx",
        "from __future__ import (annotations,\n    division)\nx: Undefined = 1\nx",
        "from __future__ import division\nfrom __future__ import annotations\nx: Undefined = 1\nx",
    ],
)
def test_a_cells_own_future_imports_move_to_the_first_line(code):
    program = build_program(code, imports=REFERENCE)
    assert run(program.source) == ("1\n", None)
    assert len(program.source.splitlines()) - 1 == len(echo_last_expression(code).splitlines())
    stateful = build_program(code, earlier_cells=["y = 2"], imports=AUTO_IMPORTS["none"])
    assert run(stateful.source) == ("1\n", None)


def test_future_imports_after_other_code_are_left_for_python_to_refuse():
    code = "x = 1\nfrom __future__ import annotations"
    assert hoist_future_imports(code) == ([], code)


def test_stateful_replay_and_auto_imports_share_the_first_line():
    program = build_program("print(total + math.floor(1.5))\nundefined", ["total = 5"], imports=REFERENCE_JUDGE)
    first_line = program.source.splitlines()[0]
    assert program.line_offset == 1 and "import math" in first_line and "b64decode" in first_line
    stdout, line = run(program.source)
    assert (stdout, line - program.line_offset) == ("6\n", 2)


def test_an_unknown_auto_import_set_is_refused():
    from cleaner.tools.code_interpreter import CodeInterpreterConfig

    with pytest.raises(ValueError, match=r"auto_imports must be one of \['none', 'reference', 'reference_judge'\]"):
        CodeInterpreterConfig.from_dict({"auto_imports": "everything"})
    assert CodeInterpreterConfig().auto_imports == "reference"
