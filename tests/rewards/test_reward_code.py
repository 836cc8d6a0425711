"""Code rewards against the real code-judge (`judge_url`: `code-judge serve` with its own Redis and sandbox)."""

from __future__ import annotations

import json
import socket

import pytest

from cleaner.rewards import compute_score

pytestmark = pytest.mark.timeout(180)

SUM_STDIN = {"inputs": ["1 2\n", "3 4\n", "10 20\n"], "outputs": ["3\n", "7\n", "30\n"]}
# TACO call-based: each input is the argument list, each output the return value wrapped in a list
ADD_CALL = {"fn_name": "add", "inputs": [[1, 2], [3, 4], [-5, 5]], "outputs": [[3], [7], [0]]}
# LiveCodeBench functional: one JSON argument per line, the output as JSON text
FIRST_K_CALL = {"fn_name": "firstK", "inputs": ["[5, 1, 4]\n2", "[3]\n1"], "outputs": ["[5, 1]", "[3]"]}
MAX_PAIR_ASSERT = {
    "import_prefix": "from typing import *\nimport collections\n",
    "test_code": (
        "def check(candidate):\n"
        "    assert candidate(nums=[1, 2, 3]) == 5\n"
        "    assert candidate(nums=[5, 5]) == 10\n"
        "    assert candidate(nums=[-1, -2, 7, 0]) == 7\n"
    ),
    "entry_point": "Solution().maxPair",
}


def closed_port_url() -> str:
    """A loopback URL nothing listens on: every judge call is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def reply(code: str) -> str:
    return f"<think>\nI will write it.\n</think>\n\nHere is my solution:\n```python\n{code}\n```\n"


async def score(judge_url: str, data_source: str, code: str, ground_truth, **options) -> dict:
    return await compute_score(data_source, reply(code), ground_truth, judge_url=judge_url, **options)


async def test_stdin_problem_right_wrong_partial_crashing_and_respaced(judge_url):
    right = "a, b = map(int, input().split())\nprint(a + b)"
    wrong = "a, b = map(int, input().split())\nprint(a - b)"
    partial = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)"
    crashing = "raise RuntimeError('boom')"
    respaced = "a, b = map(int, input().split())\nprint(f'  {a + b:.1f}  ')"
    with_main = (
        "import sys\ndef main():\n    a, b = map(int, sys.stdin.read().split())\n    print(a + b)\n"
        "if __name__ == '__main__':\n    main()"
    )
    variants = [
        ("right", right),
        ("wrong", wrong),
        ("partial", partial),
        ("crashing", crashing),
        ("respaced", respaced),
        ("with_main", with_main),
    ]
    results = {name: await score(judge_url, "train-code-taco-easy", code, SUM_STDIN) for name, code in variants}
    assert results["right"] == {
        "score": 1.0,
        "acc": True,
        "pred": right + "\n",
        "reason": "correct",
        "infra_error": False,
        "tests_passed": 3,
        "tests_total": 3,
    }
    assert (results["wrong"]["score"], results["wrong"]["acc"], results["wrong"]["reason"]) == (
        0.0,
        False,
        "tests_failed",
    )
    assert results["partial"]["score"] == pytest.approx(2 / 3) and results["partial"]["tests_passed"] == 2
    assert results["crashing"]["score"] == 0.0 and results["crashing"]["infra_error"] is False
    assert results["respaced"]["acc"] is True  # "  3.0  " is the same answer as "3"
    assert results["with_main"]["acc"] is True  # stdin programs run as __main__


async def test_a_slow_solution_fails_its_tests_by_the_time_limit(judge_url):
    slow = "import time\nif input() == '10 20':\n    while True:\n        pass\nprint(3 if True else 0)"
    result = await score(judge_url, "LiveCodeBench_v6", slow, json.dumps(SUM_STDIN))
    assert result["tests_total"] == 3 and result["tests_passed"] == 1
    assert result["infra_error"] is False


async def test_call_based_tests_with_functions_and_solution_classes(judge_url):
    function = "def add(a, b):\n    print('debug', a, b)\n    return a + b"
    method = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b"
    tuple_return = "def firstK(nums: List[int], k: int):\n    return tuple(nums[:k])"
    wrong = "def add(a, b):\n    return a * b"
    assert (await score(judge_url, "train-code-taco-medium", function, ADD_CALL))["acc"] is True
    assert (await score(judge_url, "train-code-taco-medium", method, json.dumps(ADD_CALL)))["acc"] is True
    assert (await score(judge_url, "LiveCodeBench_v6", tuple_return, json.dumps(FIRST_K_CALL)))["acc"] is True
    wrong_result = await score(judge_url, "train-code-taco-medium", wrong, ADD_CALL)
    assert (wrong_result["tests_passed"], wrong_result["tests_total"]) == (0, 3)


async def test_exiting_early_cannot_fake_a_pass(judge_url):
    for cheat in ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "print('ok')\nraise SystemExit"]:
        result = await score(judge_url, "train-code-taco-medium", cheat, ADD_CALL)
        assert result["tests_passed"] == 0, cheat
        result = await score(judge_url, "train-code-leetcode-easy", cheat, MAX_PAIR_ASSERT)
        assert result["tests_passed"] == 0, cheat


async def test_import_prefix_test_code_entry_point_counts_each_assertion(judge_url):
    right = "class Solution:\n    def maxPair(self, nums: List[int]) -> int:\n        a, b = sorted(nums)[-2:]\n        return a + b"
    ignores_negatives = "class Solution:\n    def maxPair(self, nums):\n        a, b = sorted(x for x in nums if x > 0)[-2:]\n        return a + b"
    result = await score(judge_url, "test-code-leetcode-medium", right, MAX_PAIR_ASSERT)
    assert (result["score"], result["acc"], result["tests_passed"], result["tests_total"]) == (1.0, True, 3, 3)
    partial = await score(judge_url, "train-code-leetcode-medium", ignores_negatives, json.dumps(MAX_PAIR_ASSERT))
    assert partial["score"] == pytest.approx(2 / 3) and partial["acc"] is False


async def test_all_pass_scoring_and_test_cap(judge_url):
    partial = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)"
    assert (await score(judge_url, "train-code-taco-easy", partial, SUM_STDIN, code_scoring="all_pass"))["score"] == 0.0
    capped = await score(
        judge_url, "train-code-taco-easy", partial, SUM_STDIN, code_scoring="all_pass", code_max_tests=2
    )
    assert (capped["score"], capped["acc"], capped["tests_total"]) == (1.0, True, 2)


async def test_missing_or_unparsable_code_scores_minus_one_without_the_judge():
    closed = closed_port_url()
    no_code = await compute_score("train-code-taco-easy", "I think the answer is 3.", SUM_STDIN, judge_url=closed)
    assert (no_code["score"], no_code["reason"], no_code["pred"]) == (-1.0, "no_answer", "")
    broken = await compute_score("train-code-taco-easy", reply("def f(:\n  pass"), SUM_STDIN, judge_url=closed)
    assert (broken["score"], broken["reason"], broken["infra_error"]) == (-1.0, "unparsable", False)
    # a ```python block inside a tool call is a call, not the final answer
    in_call = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "```python\\nprint(3)\\n```"}}'
    assert (await compute_score("train-code-taco-easy", in_call, SUM_STDIN, judge_url=closed))["reason"] == "no_answer"


async def test_a_judge_outage_is_reported_as_an_infra_error_not_a_wrong_answer():
    closed = closed_port_url()
    result = await compute_score(
        "train-code-taco-easy",
        reply("print(3)"),
        SUM_STDIN,
        judge_url=closed,
        judge_max_retries=1,
        infra_error_score=0.0,
    )
    assert result == {
        "score": 0.0,
        "acc": False,
        "pred": "print(3)\n",
        "reason": "judge_unavailable",
        "infra_error": True,
        "tests_passed": 0,
        "tests_total": 0,
    }


async def test_solutions_may_use_the_names_the_reference_judge_imported_for_them(judge_url):
    """The reference's judge imported math/numpy/sympy/itertools/collections for a program that names them and
    always gave it typing's names; its code rewards scored such programs as correct, and so does the default."""
    stdin = "a, b = map(int, input().split())\nprint(math.gcd(a, b) * 0 + a + b)"
    call = "class Solution:\n    def add(self, a: Foo, b) -> int:\n        return int(np.add(a, b))"
    assertion = (
        "class Solution:\n    def maxPair(self, nums: List[int]) -> int:\n"
        "        return sum(sorted(nums)[-2:]) + 0 * math.isqrt(4)"
    )
    assert (await score(judge_url, "train-code-taco-easy", stdin, SUM_STDIN))["acc"] is True
    assert (await score(judge_url, "train-code-taco-easy", call, ADD_CALL))["acc"] is True
    assert (await score(judge_url, "train-code-leetcode-Easy", assertion, MAX_PAIR_ASSERT))["acc"] is True
    plain = await score(judge_url, "train-code-taco-easy", stdin, SUM_STDIN, code_auto_imports="none")
    assert (plain["acc"], plain["tests_passed"]) == (False, 0)  # NameError: math is not defined


async def test_an_unknown_auto_import_set_is_a_configuration_error():
    with pytest.raises(ValueError, match="code_auto_imports must be one of"):
        await compute_score("train-code-taco-easy", reply("print(1)"), SUM_STDIN, code_auto_imports="all")
