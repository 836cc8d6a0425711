"""LiveCodeBench scoring runs every program behind the official harness's import prelude.

The official evaluator (lcb_runner/evaluation/testing_util.py, `import_string`) puts these imports before every
solution; a solution that relies on them passes there, so it must pass here for pass@1 to match.
"""

from __future__ import annotations

import json

from cleaner.evaluation.generations import Sample
from cleaner.evaluation.lcb_judge import LCB_IMPORT_PRELUDE, score_samples_sync

STAR = (
    "string re datetime collections heapq bisect copy math random statistics itertools functools operator io sys json"
)


def test_the_prelude_is_the_official_one():
    official = (
        "".join(f"from {module} import *\n" for module in [*STAR.split(), "builtins", "typing"])
        + "".join(f"import {module}\n" for module in STAR.split())
        + "sys.setrecursionlimit(50000)\n"
    )
    assert official == LCB_IMPORT_PRELUDE


def sample(code: str, spec: dict) -> Sample:
    return Sample(
        "LiveCodeBench_v6",
        "p",
        False,
        0.0,
        response=f"```python\n{code}```",
        ground_truth=json.dumps(spec),
        question_id="q",
    )


def test_programs_using_the_prelude_without_importing_pass_on_the_real_judge(judge_url):
    stdin_code = (
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "a, b = map(int, input().split())\n"
        "print(gcd(a, b), Counter('aab')['a'], depth(5000), deque([1]).pop())\n"
    )
    stdin_spec = {"inputs": ["12 18\n"], "outputs": ["6 2 5000 1\n"]}
    call_code = (
        "class Solution:\n    def prefix(self, xs: List[int]) -> List[int]:\n        return list(accumulate(xs))\n"
    )
    call_spec = {"fn_name": "prefix", "inputs": ["[1, 2, 3]"], "outputs": ["[1, 3, 6]"]}
    scores = score_samples_sync([sample(stdin_code, stdin_spec), sample(call_code, call_spec)], judge_url)
    assert [(score.passed, score.total) for score in scores] == [(1, 1), (1, 1)]
