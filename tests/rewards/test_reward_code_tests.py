"""Reading hidden tests from the three ground-truth forms, and the tolerant stdout comparison."""

from __future__ import annotations

import json

import pytest

from cleaner.rewards.code_reward import same_output
from cleaner.rewards.code_tests import AssertionTest, CallTest, GroundTruthError, StdioTest, parse_code_tests


def test_stdin_pairs_from_a_dict_or_its_json_string_and_line_lists():
    spec = {"inputs": ["1 2\n", ["3", "4"]], "outputs": ["3\n", ["7"]]}
    expected = [StdioTest("1 2\n", "3\n"), StdioTest("3\n4", "7")]
    assert parse_code_tests(spec) == expected
    assert parse_code_tests(json.dumps(spec)) == expected


def test_lists_read_by_pandas_as_numpy_arrays_are_accepted():
    import numpy as np

    spec = {"inputs": np.array(["1\n", "2\n"], dtype=object), "outputs": np.array(["1\n", "2\n"], dtype=object)}
    assert parse_code_tests(spec) == [StdioTest("1\n", "1\n"), StdioTest("2\n", "2\n")]


def test_call_based_inputs_as_argument_lists_or_json_lines():
    assert parse_code_tests({"fn_name": "f", "inputs": [[1, [2]]], "outputs": [[3]]}) == [CallTest("f", [1, [2]], [3])]
    lcb = {"fn_name": "g", "inputs": ['[1, 2]\n"ab"'], "outputs": ["true"]}
    assert parse_code_tests(lcb) == [CallTest("g", [[1, 2], "ab"], True)]
    # inputs/outputs stored as JSON strings inside the JSON (as some LiveCodeBench exports do)
    nested = {"fn_name": "h", "inputs": json.dumps([[1]]), "outputs": json.dumps(["x"])}
    assert parse_code_tests(nested) == [CallTest("h", [1], "x")]


def test_each_assertion_of_check_becomes_its_own_test():
    test_code = (
        "import math\n"
        "def check(candidate):\n"
        "    tolerance = 1e-6\n"
        "    assert candidate(1) == 2\n"
        "    assert candidate(\n"
        "        2,\n"
        "    ) == 3\n"
    )
    tests = parse_code_tests({"import_prefix": "import os", "test_code": test_code, "entry_point": "Solution().f"})
    assert len(tests) == 2 and all(isinstance(t, AssertionTest) for t in tests)
    first, second = (t.test_code for t in tests)
    assert "candidate(1)" in first and "2,\n" not in first and "tolerance" in first
    assert "candidate(1)" not in second and "    ) == 3" in second and "import math" in second
    compile(first, "<first>", "exec")
    compile(second, "<second>", "exec")


def test_a_check_without_plain_assertions_is_one_test():
    test_code = "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i\n"
    assert parse_code_tests({"import_prefix": "", "test_code": test_code, "entry_point": "f"}) == [
        AssertionTest("", test_code, "f")
    ]


@pytest.mark.parametrize(
    "ground_truth, message",
    [
        ("not json", "not JSON"),
        ([1, 2], "must be a dict"),
        ({"tests": []}, "needs `inputs` \\+ `outputs`"),
        ({"inputs": ["1"], "outputs": []}, "1 inputs but 0 outputs"),
        ({"inputs": [], "outputs": []}, "no tests"),
        ({"inputs": 5, "outputs": [1]}, "must be a list"),
        ({"fn_name": "f", "inputs": ["[1"], "outputs": ["1"]}, "not JSON lines"),
        ({"import_prefix": "", "test_code": "def check(:", "entry_point": "f"}, "not valid Python"),
        ({"import_prefix": "", "test_code": "x = 1", "entry_point": "f"}, "no `check"),
    ],
)
def test_malformed_ground_truth_is_a_clear_data_error(ground_truth, message):
    with pytest.raises(GroundTruthError, match=message):
        parse_code_tests(ground_truth)


@pytest.mark.parametrize(
    "got, want, same",
    [
        ("3\n", "3", True),
        ("1 2  3 \n4\n\n", "1 2 3\n4", True),
        ("3.0000001", "3", True),
        ("0.333333", "0.3333333333", True),
        ("3.1", "3", False),
        ("1 2", "1\n2", False),
        ("YES", "yes", False),
        ("", "0", False),
    ],
)
def test_stdout_comparison_ignores_spacing_and_float_formatting_only(got, want, same):
    assert same_output(got, want) is same
