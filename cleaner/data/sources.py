"""Which `data_source` values we know, what kind of task each is, and the prompt text each kind gets.

The kind is decided per row from that row's own `data_source` (the reference decided it once per file,
from row 0, so every code prompt of the 30K set got the math "no units" hint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

NO_TOOL_AGENT = "single_turn_agent"


class TaskKind(str, Enum):
    MATH = "math"  # training math/science rows whose prompt already holds the problem
    CODE = "code"  # training code rows: ground truth is a test specification
    AIME = "aime"  # AIME 2024/2025 eval files: problem + integer answer columns
    GPQA = "gpqa"  # GPQA-Diamond: multiple choice, the answer is a letter
    LCB = "livecodebench"  # LiveCodeBench: stdin/stdout or functional tests, scored by the judge


@dataclass(frozen=True)
class SourceRule:
    pattern: str  # full-match regular expression on data_source
    kind: TaskKind
    numeric_answer: bool = False  # add the "no units inside \boxed{}" hint


# Ordered: the first full match wins.
SOURCE_RULES: tuple[SourceRule, ...] = (
    SourceRule(r"AIME202[45]", TaskKind.AIME),
    SourceRule(r"gpqa_diamond", TaskKind.GPQA),
    SourceRule(r"LiveCodeBench_v\d+", TaskKind.LCB),
    SourceRule(r"math_dapo|mega-science", TaskKind.MATH, numeric_answer=True),
    SourceRule(r"train-math-[\w.\-]+", TaskKind.MATH, numeric_answer=True),
    SourceRule(r"(train|test)-code-[\w.\-]+", TaskKind.CODE),
)

EVAL_KINDS = (TaskKind.AIME, TaskKind.GPQA, TaskKind.LCB)
CODE_KINDS = (TaskKind.CODE, TaskKind.LCB)


def rule_for(data_source: str) -> SourceRule:
    for rule in SOURCE_RULES:
        if re.fullmatch(rule.pattern, data_source):
            return rule
    known = ", ".join(rule.pattern for rule in SOURCE_RULES)
    raise ValueError(f"unknown data_source {data_source!r} (known patterns: {known})")


def is_code_source(data_source: str) -> bool:
    """Code rows are sampled separately by the filter and scored by running tests."""
    return "code" in data_source.lower() or rule_for(data_source).kind in CODE_KINDS


# Prompt pieces. Written for this project; they ask for the same behaviour as the paper's prompts:
# plan first, use the Python tool to compute/check, stop calling it once sure, then answer in a fixed format.
TOOL_HINT = (
    "\n\nYou have a Python tool. Plan your approach first, then use the tool to compute, explore or check "
    "intermediate results; it is more reliable than mental arithmetic."
)
CODE_TOOL_HINT = (
    "\n\nYou have a Python tool. Plan your approach first, then use it to run your code on small test cases "
    "you design yourself before you submit."
)
BOXED_HINT = (
    "\n\nWhen you are sure of your final answer, stop calling the tool and write the answer as "
    "\\boxed{your final answer}."
)
NUMERIC_HINT = "\nPut only the final numerical value inside \\boxed{}, without units."
LETTER_HINT = "\nPut only the letter of the correct option inside \\boxed{}, e.g. \\boxed{C}."
CODE_SUBMIT_HINT = (
    "\n\nWhen you are sure your program is correct, stop calling the tool and submit the complete program "
    "in one fenced block:\n```python\n# your code\n```"
)
STDIO_HINT = "\n\nYour program reads the input from standard input and writes the answer to standard output."


def math_intro(subject: str = "math") -> str:
    return f"Solve the following {subject} problem step by step.\n\n"
