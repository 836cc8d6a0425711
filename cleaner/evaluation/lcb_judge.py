"""Score LiveCodeBench programs on our code-judge against the hidden tests.

Every program runs behind the official LiveCodeBench harness's import prelude (`import_string` in
`lcb_runner/evaluation/testing_util.py` of github.com/LiveCodeBench/LiveCodeBench), which it puts before every
solution, stdin and call-based alike: a program that uses e.g. `gcd`, `Counter` or `List` without importing
them passes there, so it must pass here for pass@1 to match the official evaluator.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tqdm import tqdm

from cleaner.evaluation.generations import Sample
from cleaner.evaluation.livecodebench import extract_program, hidden_tests, runnable_program
from cleaner.tools.judge_client import JudgeClient, JudgeClientConfig, JudgeSubmission

# The official prelude, in its order: star imports (`builtins` after `io`/`sys`/..., so `open` and `compile` are the
# builtins again), then the modules themselves (so `datetime` is the module), then a deeper recursion limit.
_LCB_STAR_IMPORTS = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
    "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing",
)  # fmt: skip
LCB_IMPORT_PRELUDE = (
    "".join(f"from {module} import *\n" for module in _LCB_STAR_IMPORTS)
    + "".join(f"import {module}\n" for module in _LCB_STAR_IMPORTS if module not in ("builtins", "typing"))
    + "sys.setrecursionlimit(50000)\n"
)


@dataclass(frozen=True)
class ProgramScore:
    question_id: str
    passed: int
    total: int

    @property
    def correct(self) -> bool:
        return self.passed == self.total


async def score_samples(samples: list[Sample], judge_url: str, request_timeout_s: float = 600.0) -> list[ProgramScore]:
    """One judge batch per trajectory (all its tests); a trajectory without a program scores 0."""
    client = JudgeClient(JudgeClientConfig(url=judge_url, request_timeout_s=request_timeout_s))
    try:
        scores = []
        for sample in tqdm(samples, desc="LiveCodeBench tests", unit="program"):
            scores.append(await _score_one(client, sample))
        return scores
    finally:
        await client.aclose()


async def _score_one(client: JudgeClient, sample: Sample) -> ProgramScore:
    if not sample.ground_truth or not sample.question_id:
        raise ValueError(f"trajectory of problem {sample.problem[:60]!r} lacks ground truth or question_id")
    cases, fn_name = hidden_tests(sample.ground_truth)
    program = extract_program(sample.response)
    if program is None:
        return ProgramScore(sample.question_id, 0, len(cases))
    code = LCB_IMPORT_PRELUDE + runnable_program(program, fn_name)
    verdicts = await client.run_batch([JudgeSubmission(code, case.stdin, case.expected_output) for case in cases])
    return ProgramScore(sample.question_id, sum(v.success for v in verdicts), len(cases))


def score_samples_sync(samples: list[Sample], judge_url: str) -> list[ProgramScore]:
    return asyncio.run(score_samples(samples, judge_url))
