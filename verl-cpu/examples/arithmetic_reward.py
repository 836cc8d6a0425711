"""verl function reward for `arithmetic_data.py`: 1 when the last `\\boxed{...}` holds the sum, else 0.

Passed to verl as `reward.custom_reward_function.path=<this file>` (`name=compute_score`, verl's default).
"""

from __future__ import annotations

import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    answers = BOXED.findall(solution_str)
    return 1.0 if answers and answers[-1].strip() == ground_truth else 0.0
