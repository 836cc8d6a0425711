"""Hidden tests of a coding problem, read from its ground truth, and the judge submission each one becomes.

Three ground-truth forms are accepted, as a dict or as its JSON string (LiveCodeBench stores strings):
- `{"inputs": [...], "outputs": [...]}`: stdin/stdout pairs (TACO, LiveCodeBench stdin problems);
- the same with `"fn_name"`: call-based; each input is the argument list (or, LiveCodeBench style, a string
  with one JSON argument per line) and each output the return value;
- `{"import_prefix": ..., "test_code": ..., "entry_point": ...}` (LeetCode): `test_code` defines
  `check(candidate)`; each `assert` in it becomes its own test, so partial credit counts assertions.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from cleaner.rewards.code_harness import assertion_program, call_program
from cleaner.tools.cell import AUTO_IMPORTS, AutoImports, with_first_line
from cleaner.tools.judge_client import JudgeSubmission


@dataclass(frozen=True)
class StdioTest:
    stdin: str
    expected_stdout: str


@dataclass(frozen=True)
class CallTest:
    fn_name: str
    args: list[Any]
    expected: Any


@dataclass(frozen=True)
class AssertionTest:
    import_prefix: str
    test_code: str  # `check(candidate)` holding exactly one of the original assertions
    entry_point: str


CodeTest = StdioTest | CallTest | AssertionTest


class GroundTruthError(ValueError):
    """The dataset row's ground truth is not one of the supported test forms."""


def parse_code_tests(ground_truth: Any) -> list[CodeTest]:
    spec = _as_dict(ground_truth)
    if {"import_prefix", "test_code", "entry_point"} <= spec.keys():
        return _assertion_tests(spec)
    if {"inputs", "outputs"} <= spec.keys():
        return _io_tests(spec)
    raise GroundTruthError(
        "a code ground truth needs `inputs` + `outputs` (optionally `fn_name`) or `import_prefix` + `test_code` + "
        f"`entry_point`; got keys {sorted(spec)}"
    )


def submission_for(
    test: CodeTest, solution: str, token: str, imports: AutoImports = AUTO_IMPORTS["none"]
) -> JudgeSubmission:
    """The judge submission that passes (verdict `success`) exactly when `solution` passes `test`.

    `imports` are the names the solution may use without importing them (cleaner.tools.cell.AUTO_IMPORTS).
    """
    if isinstance(test, StdioTest):
        program, _ = with_first_line(solution, imports.statements([solution]), imports.postponed_annotations)
        return JudgeSubmission(code=program, stdin=test.stdin, expected_output=test.expected_stdout)
    if isinstance(test, CallTest):
        program = call_program(solution, test.fn_name, test.args, test.expected, token, imports)
        return JudgeSubmission(code=program, expected_output=token)
    return JudgeSubmission(
        code=assertion_program(solution, test.import_prefix, test.test_code, test.entry_point, token, imports),
        expected_output=token,
    )


def _as_dict(ground_truth: Any) -> dict[str, Any]:
    return _decoded(ground_truth, dict, "the code ground truth")


def _decoded(value: Any, kind: type, what: str) -> Any:
    """`value`, or the JSON it holds when it is a string, which must be a `kind`."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise GroundTruthError(f"{what} is a string but not JSON: {exc}") from exc
    if not isinstance(value, kind):
        raise GroundTruthError(f"{what} must be a {kind.__name__} or its JSON, got {type(value).__name__}")
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(line) for line in value)
    return str(value)


def _io_tests(spec: dict[str, Any]) -> list[CodeTest]:
    inputs, outputs = _as_list(spec["inputs"], "inputs"), _as_list(spec["outputs"], "outputs")
    if len(inputs) != len(outputs):
        raise GroundTruthError(f"the code ground truth has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise GroundTruthError("the code ground truth has no tests")
    fn_name = spec.get("fn_name")
    if not fn_name:
        return [StdioTest(_as_text(i), _as_text(o)) for i, o in zip(inputs, outputs)]
    return [CallTest(str(fn_name), _call_args(i), _call_expected(o)) for i, o in zip(inputs, outputs)]


def _as_list(value: Any, name: str) -> list[Any]:
    if hasattr(value, "tolist"):  # a numpy array, as pandas gives nested parquet lists
        value = value.tolist()
    return _decoded(value, list, f"`{name}` of the code ground truth")


def _call_args(raw: Any) -> list[Any]:
    if isinstance(raw, list):
        return raw
    if isinstance(raw, str):  # LiveCodeBench functional tests: one JSON value per line, one line per argument
        try:
            return [json.loads(line) for line in raw.split("\n") if line.strip()]
        except json.JSONDecodeError as exc:
            raise GroundTruthError(f"call-based test input is not JSON lines: {raw[:100]!r}") from exc
    return [raw]


def _call_expected(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw  # a plain string return value
    return raw


def _assertion_tests(spec: dict[str, Any]) -> list[CodeTest]:
    import_prefix, test_code, entry_point = (str(spec[key]) for key in ("import_prefix", "test_code", "entry_point"))
    try:
        module = ast.parse(test_code)
    except SyntaxError as exc:
        raise GroundTruthError(f"`test_code` of the code ground truth is not valid Python: {exc}") from exc
    check = next((node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check"), None)
    if check is None:
        raise GroundTruthError("`test_code` of the code ground truth defines no `check(candidate)` function")
    asserts = [node for node in check.body if isinstance(node, ast.Assert)]
    if not asserts:  # the checks are not plain top-level assertions: the whole check is one test
        return [AssertionTest(import_prefix, test_code, entry_point)]
    lines = test_code.splitlines()
    tests: list[CodeTest] = []
    for kept in asserts:
        dropped = {n for node in asserts if node is not kept for n in range(node.lineno - 1, node.end_lineno)}
        single = "\n".join(line for number, line in enumerate(lines) if number not in dropped)
        tests.append(AssertionTest(import_prefix, single, entry_point))
    return tests
