"""Code answers: the last ```python block of the final turn, run on the judge against the hidden tests.

All tests of one response go to the judge in a single batched call. The score is the fraction of tests passed
(or, with `code_scoring="all_pass"`, 1 when all pass and 0 otherwise); a response without readable code scores
-1. If the judge cannot run the tests, the row is an infrastructure error: `infra_error` is set and the score is
`infra_error_score`, so the outage is never mistaken for a wrong program.
"""

from __future__ import annotations

import ast
import logging
import secrets
from typing import Any

from cleaner.rewards.code_tests import StdioTest, parse_code_tests, submission_for
from cleaner.rewards.config import RewardConfig
from cleaner.rewards.final_answer import final_turn, last_python_block
from cleaner.rewards.result import CORRECT_SCORE, Reason, RewardResult
from cleaner.tools.cell import auto_imports
from cleaner.tools.judge_client import JudgeClientConfig, JudgeUnavailable, JudgeVerdict, shared_judge_client

logger = logging.getLogger(__name__)

_FLOAT_TOLERANCE = 1e-6


async def score_code(solution_str: str, ground_truth: Any, config: RewardConfig) -> RewardResult:
    tests = parse_code_tests(ground_truth)
    if config.code_max_tests is not None:
        tests = tests[: config.code_max_tests]
    code = last_python_block(final_turn(solution_str))
    if code is None:
        return RewardResult.incorrect("", Reason.NO_ANSWER)
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: source with NUL bytes
        return RewardResult.incorrect(code, Reason.UNPARSABLE)

    token = secrets.token_hex(16)
    client = shared_judge_client(
        JudgeClientConfig(
            url=config.judge_url,
            request_timeout_s=config.judge_request_timeout_s,
            max_retries=config.judge_max_retries,
        )
    )
    try:
        imports = auto_imports(config.code_auto_imports)
        verdicts = await client.run_batch([submission_for(test, code, token, imports) for test in tests])
    except JudgeUnavailable as exc:
        logger.warning("code reward not computed: %s", exc)
        return RewardResult(config.infra_error_score, False, code, Reason.JUDGE_UNAVAILABLE, infra_error=True)

    passed = sum(_passed(test, verdict) for test, verdict in zip(tests, verdicts))
    all_passed = passed == len(tests)
    if config.code_scoring == "all_pass":
        score = CORRECT_SCORE if all_passed else 0.0
    else:
        score = passed / len(tests)
    reason = Reason.CORRECT if all_passed else Reason.TESTS_FAILED
    return RewardResult(score, all_passed, code, reason, tests_passed=passed, tests_total=len(tests))


def _passed(test: Any, verdict: JudgeVerdict) -> bool:
    if verdict.success:
        return True
    # The judge compares stdout exactly (up to surrounding whitespace); accept the same answer written with
    # other spacing or float formatting, as competitive-programming checkers do.
    return (
        isinstance(test, StdioTest)
        and verdict.run_success
        and not verdict.truncated
        and same_output(verdict.stdout, test.expected_stdout)
    )


def same_output(got: str, want: str) -> bool:
    """Token-wise equality of two outputs, line by line; numeric tokens match within a small tolerance."""
    got_lines, want_lines = _lines(got), _lines(want)
    if len(got_lines) != len(want_lines):
        return False
    for got_line, want_line in zip(got_lines, want_lines):
        got_tokens, want_tokens = got_line.split(), want_line.split()
        if len(got_tokens) != len(want_tokens):
            return False
        if not all(_same_token(g, w) for g, w in zip(got_tokens, want_tokens)):
            return False
    return True


def _lines(text: str) -> list[str]:
    return text.strip().splitlines()


def _same_token(got: str, want: str) -> bool:
    if got == want:
        return True
    try:
        got_number, want_number = float(got), float(want)
    except ValueError:
        return False
    return abs(got_number - want_number) <= _FLOAT_TOLERANCE * max(1.0, abs(want_number))
