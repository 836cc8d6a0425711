"""The prompt text each kind of `data_source` gets (the kind itself: `cleaner.source_kinds`).

The kind is decided per row from that row's own `data_source` (the reference decided it once per file,
from row 0, so every code prompt of the 30K set got the math "no units" hint).
"""

from __future__ import annotations

from cleaner.source_kinds import CODE_KINDS, SourceRule, known_patterns, source_rule

NO_TOOL_AGENT = "single_turn_agent"


def rule_for(data_source: str) -> SourceRule:
    rule = source_rule(data_source)
    if rule is None:
        raise ValueError(f"unknown data_source {data_source!r} (known patterns: {', '.join(known_patterns())})")
    return rule


def is_code_source(data_source: str) -> bool:
    """Code rows are sampled separately by the filter and scored by running tests."""
    return rule_for(data_source).kind in CODE_KINDS


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
