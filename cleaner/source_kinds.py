"""What kind of task each `data_source` is: the one classifier data preparation and the reward both use.

Case-insensitive shell patterns, first match wins. They cover the Open-AgentRL training sources (math_dapo,
mega-science, train-math-{numinamath1.5_*,deepscaler,still3,aime19832023,omnimath}, train-code-{taco,leetcode}-*,
test-code-leetcode-*) and the evaluation sets (AIME2024, AIME2025, gpqa_diamond, LiveCodeBench_v6).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import Enum


class TaskKind(str, Enum):
    MATH = "math"  # math/science rows whose prompt already holds the problem
    CODE = "code"  # code rows: ground truth is a test specification
    AIME = "aime"  # AIME 2024/2025 eval files: problem + integer answer columns
    GPQA = "gpqa"  # GPQA-Diamond: multiple choice, the answer is a letter
    LCB = "livecodebench"  # LiveCodeBench: stdin/stdout or functional tests, scored by the judge


@dataclass(frozen=True)
class SourceRule:
    pattern: str  # case-insensitive shell pattern on data_source
    kind: TaskKind
    numeric_answer: bool = False  # the prompt asks for a bare number inside \boxed{} ("no units")


SOURCE_RULES: tuple[SourceRule, ...] = (
    SourceRule("aime202[45]", TaskKind.AIME),
    SourceRule("gpqa*", TaskKind.GPQA),
    SourceRule("livecodebench_v*", TaskKind.LCB),
    SourceRule("lcb*", TaskKind.LCB),
    SourceRule("*code*", TaskKind.CODE),
    SourceRule("*taco*", TaskKind.CODE),
    SourceRule("math_dapo", TaskKind.MATH, numeric_answer=True),
    SourceRule("mega*science*", TaskKind.MATH, numeric_answer=True),
    SourceRule("train-math-*", TaskKind.MATH, numeric_answer=True),
    SourceRule("*math*", TaskKind.MATH),
    SourceRule("aime*", TaskKind.MATH),
    SourceRule("*deepscaler*", TaskKind.MATH),
    SourceRule("*numina*", TaskKind.MATH),
    SourceRule("*still*", TaskKind.MATH),
)
CODE_KINDS = (TaskKind.CODE, TaskKind.LCB)


def source_rule(data_source: str) -> SourceRule | None:
    """The first rule matching `data_source`, or None for a source nobody knows."""
    lowered = data_source.lower()
    return next((rule for rule in SOURCE_RULES if fnmatch.fnmatchcase(lowered, rule.pattern)), None)


def known_patterns() -> list[str]:
    return [rule.pattern for rule in SOURCE_RULES]
