"""LiveCodeBench: pull the final program out of each trajectory, export it in the official
custom-evaluation format (a JSON list of {question_id, code_list}), and turn a test specification into
judge submissions (one per hidden test).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from cleaner.evaluation.generations import Sample

FENCED_PYTHON = re.compile(r"```python[ \t]*\n(.*?)```", re.DOTALL)
THINK_END = "</think>"

# Call-based (LeetCode-style) problems: the program defines `class Solution`; this harness reads one
# JSON value per stdin line as the arguments and prints the JSON of the result for the judge to compare.
CALL_HARNESS = """

import json as _cleaner_json
import sys as _cleaner_sys
_cleaner_args = [_cleaner_json.loads(line) for line in _cleaner_sys.stdin.read().splitlines() if line.strip()]
print(_cleaner_json.dumps(Solution().{fn_name}(*_cleaner_args)))
"""


def extract_program(response: str | None) -> str | None:
    """The last ```python block after the reasoning (tool-call code inside <think> is not a submission)."""
    if not response:
        return None
    answer = response.rsplit(THINK_END, 1)[-1]
    blocks = FENCED_PYTHON.findall(answer)
    return blocks[-1].strip() + "\n" if blocks else None


def question_ids_by_ground_truth(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Map each prepared row's ground-truth JSON to its question_id.

    verl's validation dump carries the ground truth (`gts`) but not `extra_info`, so this is how a
    dumped trajectory finds its question.
    """
    mapping: dict[str, str] = {}
    for row in rows:
        ground_truth = row["reward_model"]["ground_truth"]
        question_id = (row.get("extra_info") or {}).get("question_id")
        if not question_id:
            raise ValueError(f"prepared row {row.get('extra_info')} has no question_id")
        if mapping.get(ground_truth, question_id) != question_id:
            raise ValueError(f"questions {mapping[ground_truth]} and {question_id} share identical tests")
        mapping[ground_truth] = question_id
    return mapping


def attach_question_ids(samples: list[Sample], mapping: dict[str, str]) -> list[Sample]:
    attached = []
    for sample in samples:
        question_id = sample.question_id or mapping.get(sample.ground_truth or "")
        if not question_id:
            raise ValueError(f"a trajectory of problem {sample.problem[:60]!r} matches no question_id in the dataset")
        attached.append(Sample(**{**sample.__dict__, "question_id": question_id}))
    return attached


def custom_evaluation_records(samples: list[Sample]) -> list[dict[str, Any]]:
    """[{question_id, code_list}] sorted by question_id; a trajectory without a program contributes ""."""
    programs: dict[str, list[str]] = defaultdict(list)
    for sample in samples:
        if not sample.question_id:
            raise ValueError(f"trajectory of problem {sample.problem[:60]!r} has no question_id")
        programs[sample.question_id].append(extract_program(sample.response) or "")
    return [{"question_id": qid, "code_list": programs[qid]} for qid in sorted(programs)]


@dataclass(frozen=True)
class HiddenTest:
    stdin: str
    expected_output: str


def hidden_tests(ground_truth: str) -> tuple[list[HiddenTest], str | None]:
    """The hidden tests of a stdin/stdout or call-based spec, and the function name (None for stdin)."""
    spec = json.loads(ground_truth)
    if not isinstance(spec, dict) or "inputs" not in spec or "outputs" not in spec:
        raise ValueError("LiveCodeBench ground truth must have inputs and outputs")
    if not spec["inputs"]:
        raise ValueError("LiveCodeBench ground truth has no tests")
    fn_name = spec.get("fn_name")
    cases = []
    for given, expected in zip(spec["inputs"], spec["outputs"], strict=True):
        if fn_name:
            args = (
                given
                if isinstance(given, list)
                else [json.loads(line) for line in str(given).splitlines() if line.strip()]
            )
            value = json.loads(expected) if isinstance(expected, str) else expected
            cases.append(HiddenTest("\n".join(json.dumps(arg) for arg in args) + "\n", json.dumps(value)))
        else:
            cases.append(HiddenTest(str(given), str(expected)))
    return cases, fn_name


def runnable_program(program: str, fn_name: str | None) -> str:
    return program + CALL_HARNESS.format(fn_name=fn_name) if fn_name else program
