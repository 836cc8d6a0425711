"""Scripted rollout records for the purification table and the paired comparison: only the fields they read,
with hand-checked turns. Every trajectory: turn 0 = tokens 0..3 (a call, code 2..3), tool output 4..5 (mask 0), turn 1 = 6..9."""

from __future__ import annotations

from cleaner.purify.failed_calls import FAILED_CALLS_KEY, FailedCall
from cleaner.purify.roc import RocCounts
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY, Turn
from cleaner.saar.stats import FAIL_COUNTER_NAMES, PREFIX

MASK = [1, 1, 1, 1, 0, 0, 1, 1, 1, 1]  # 8 trained tokens
GENERATED = 10


def record(problem: str, sample: int, *, saar: bool, correct: bool, failed: bool = False, void: bool = False,
           spliced: bool = False) -> dict:  # fmt: skip
    """One trajectory: a call (failed if `failed`), then a final answer (or, if `void`, neither call nor answer).
    `spliced`: SAAR rolled back a failed first attempt of turn 0 (4 tokens, its call 2) and spliced a resample."""
    turns = [
        Turn(0, 4, 2, 4, call=True, answer=False, failed=failed),
        Turn(6, 10, None, None, call=False, answer=not void, failed=False, void=void),
    ]
    # rStar's counts of the same response: one tool response (an error if the call failed), the answer's turn
    counts = RocCounts(1, int(failed), answer_opens=int(not void), answers=int(not void), assistant_turns=1)
    counters = {PREFIX + name: 0 for name in FAIL_COUNTER_NAMES}
    counters[PREFIX + "fail_exception"] = int(failed or spliced)  # a rolled-back call failed too
    generated = GENERATED + (4 if spliced else 0)
    calls = []
    if failed:
        calls.append(FailedCall(0, ("exception",), 4, 2, "kept", start=0, end=4, code_start=2, code_end=4))
    if spliced:
        calls.append(FailedCall(0, ("exception",), 4, 2, "rolled_back", negative_candidate=True))
    return {
        **counters,
        PREFIX + "purified_errors": int(spliced),
        PREFIX + "response_tokens": sum(MASK),
        PREFIX + "tool_calls": 1 + int(spliced),
        "timing": {"generated_tokens": generated, "latency_s": 1.0},
        "response_ids": list(range(len(MASK))),
        "key": f"{problem}#{sample}#{'saar' if saar else 'nosaar'}",
        "problem_id": problem,
        "sample": sample,
        "saar": saar,
        "score": 1.0 if correct else -1.0,
        "acc": 1.0 if correct else 0.0,
        "response_mask": list(MASK),
        "saar_spliced_spans": [[0, 4, 1, "shallow"]] if spliced else [],
        TURNS_KEY: [turn.to_dict() for turn in turns],
        GENERATED_TOKENS_KEY: generated,
        ROC_COUNTS_KEY: counts.to_dict(),
        FAILED_CALLS_KEY: [call.to_dict() for call in calls],
    }


def off_group(problem: str) -> list[dict]:
    """SAAR off: a correct one that kept a failed call, a clean correct one, a wrong one, a wrong void one."""
    return [
        record(problem, 0, saar=False, correct=True, failed=True),
        record(problem, 1, saar=False, correct=True),
        record(problem, 2, saar=False, correct=False),
        record(problem, 3, saar=False, correct=False, void=True),
    ]


def on_group(problem: str) -> list[dict]:
    """SAAR on, same seeds: sample 0's failed call was rolled back (its turn 0 spliced from a resample)."""
    return [
        record(problem, 0, saar=True, correct=True, spliced=True),
        record(problem, 1, saar=True, correct=True),
        record(problem, 2, saar=True, correct=False),
        record(problem, 3, saar=True, correct=False, void=True),
    ]


def paired_groups(problems: int) -> list[dict]:
    return [r for index in range(problems) for r in (*off_group(f"p{index}"), *on_group(f"p{index}"))]
