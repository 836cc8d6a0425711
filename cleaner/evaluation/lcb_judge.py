"""Score LiveCodeBench programs on our code-judge against the hidden tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tqdm import tqdm

from cleaner.evaluation.generations import Sample
from cleaner.evaluation.livecodebench import extract_program, hidden_tests, runnable_program
from cleaner.tools.judge_client import JudgeClient, JudgeClientConfig, JudgeSubmission


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
    code = runnable_program(program, fn_name)
    verdicts = await client.run_batch([JudgeSubmission(code, case.stdin, case.expected_output) for case in cases])
    return ProgramScore(sample.question_id, sum(v.success for v in verdicts), len(cases))


def score_samples_sync(samples: list[Sample], judge_url: str) -> list[ProgramScore]:
    return asyncio.run(score_samples(samples, judge_url))
