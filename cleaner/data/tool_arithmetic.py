"""Generated arithmetic problems that a small model solves only by running code: `make train-cpu`'s training set.

Each problem asks for one integer that is easy to compute in a few lines of Python and impossible to guess
(big powers, sums over thousands of terms, divisor sums of six-digit numbers). A family's parameters are drawn
from `random.Random(seed)`, and its answer is computed here by the plainest loop that defines it, so a
problem set is a pure function of (families, count, seed) and every answer is checked by recomputing it
(`tests/data/test_tool_arithmetic.py` also checks each family against an independent formula).

Some families make a small model's first code fail on the judge's Python 3.11: the trailing zeros of n! for
n above about 1,750, where `str(math.factorial(n))` exceeds the 4,300-digit limit of `int` to `str` conversion
(`ValueError`, whose message names `sys.set_int_max_str_digits`), are what SAAR acts on.

Rows are verl RLHF rows in the format of the bundled demo problems (`cleaner/resources/demo_problems.jsonl`):
the python-block prompt, `reward_model.ground_truth` the answer as text, a `data_source` that the reward scores
as math (`*math*`, cleaner/source_kinds.py).
Usage: `python -m cleaner.data.tool_arithmetic OUT_DIR [--seed S] [--per-family N] [--val-count N]`.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cleaner.data.rows import write_jsonl
from cleaner.data.train_val import print_paths, write_train_val
from cleaner.names import AGENT_NAME

DATA_SOURCE = "tool-arithmetic-math"
SYSTEM_PROMPT = "You are a helpful assistant."
# The demo problems' python-block instruction (docs/demo.md): one block, nothing after it.
PYTHON_BLOCK_INSTRUCTION = (
    "Reply with one ```python code block that computes the answer and prints it, and nothing after the block. "
    "The code will be executed and you will see what it prints."
)


@dataclass(frozen=True)
class Problem:
    family: str
    question: str
    answer: int


def digit_sum_of_power(rng: random.Random) -> Problem:
    base, exponent = rng.randint(3, 9), rng.randint(150, 400)
    value, total = base**exponent, 0
    while value:
        value, digit = divmod(value, 10)
        total += digit
    return Problem("digit_sum_of_power", f"What is the sum of the digits of {base}^{exponent}?", total)


def power_mod(rng: random.Random) -> Problem:
    base, exponent, modulus = rng.randint(3, 99), rng.randint(1000, 99999), rng.randint(1000, 9999)
    result = 1
    for _ in range(exponent):
        result = result * base % modulus
    return Problem("power_mod", f"What is the remainder when {base}^{exponent} is divided by {modulus}?", result)


def sum_of_multiples(rng: random.Random) -> Problem:
    limit = rng.randint(2000, 20000)
    first, second = rng.sample([3, 4, 6, 7, 9, 11, 13], 2)
    total = sum(k for k in range(1, limit + 1) if k % first == 0 or k % second == 0)
    question = f"What is the sum of all integers from 1 to {limit} that are divisible by {first} or {second}?"
    return Problem("sum_of_multiples", question, total)


def divisor_sum(rng: random.Random) -> Problem:
    number = rng.randint(10000, 999999)
    total = sum(d for d in range(1, number + 1) if number % d == 0)
    return Problem("divisor_sum", f"What is the sum of all positive divisors of {number}?", total)


def factorial_trailing_zeros(rng: random.Random) -> Problem:
    number = rng.randint(200, 5000)
    factorial = 1
    for k in range(2, number + 1):
        factorial *= k
    zeros = 0
    while factorial % 10 == 0:
        factorial //= 10
        zeros += 1
    return Problem("factorial_trailing_zeros", f"How many trailing zeros does {number}! have?", zeros)


def collatz_steps(rng: random.Random) -> Problem:
    start = rng.randint(1000, 99999)
    value, steps = start, 0
    while value != 1:
        value = value // 2 if value % 2 == 0 else 3 * value + 1
        steps += 1
    question = (
        f"Starting from {start}, how many steps of the Collatz map (n -> n/2 if n is even, 3n+1 if n is odd) "
        "does it take to reach 1?"
    )
    return Problem("collatz_steps", question, steps)


FAMILIES: dict[str, Callable[[random.Random], Problem]] = {
    family.__name__: family
    for family in (
        digit_sum_of_power,
        power_mod,
        sum_of_multiples,
        divisor_sum,
        factorial_trailing_zeros,
        collatz_steps,
    )
}


def generate(families: list[str], per_family: int, seed: int) -> list[Problem]:
    """`per_family` problems of each family, in family order, from one generator seeded with `seed`."""
    unknown = [name for name in families if name not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {sorted(FAMILIES)}")
    if per_family < 1:
        raise ValueError(f"per_family must be at least 1, got {per_family}")
    rng = random.Random(seed)
    return [FAMILIES[name](rng) for name in families for _ in range(per_family)]


def to_row(problem: Problem, index: int, seed: int) -> dict[str, Any]:
    """A verl RLHF row in the demo problems' format; `extra_info` records how to regenerate it."""
    extra_info = {"index": index, "problem_id": f"{problem.family}-{index:02d}", "seed": seed}
    return python_block_row(DATA_SOURCE, problem.question, problem.answer, extra_info)


def python_block_row(data_source: str, question: str, answer: int, extra_info: dict[str, Any]) -> dict[str, Any]:
    """A verl RLHF row of an integer-answer math question asked for a python block, as the demo problems are."""
    return {
        "data_source": data_source,
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{question}\n\n{PYTHON_BLOCK_INSTRUCTION}"},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": extra_info,
        "agent_name": AGENT_NAME,
    }


def interleave(problems: list[Problem]) -> list[Problem]:
    """Round-robin over the families, so that any prefix (the validation rows) mixes them."""
    by_family: dict[str, list[Problem]] = {}
    for problem in problems:
        by_family.setdefault(problem.family, []).append(problem)
    columns = list(by_family.values())
    return [column[i] for i in range(max(map(len, columns))) for column in columns if i < len(column)]


def write_set(out_dir: Path, families: list[str], per_family: int, seed: int, val_count: int) -> tuple[Path, Path]:
    """`problems.jsonl` (every row), `train.parquet` (every row) and `val.parquet` (the first `val_count`)."""
    rows = [
        to_row(problem, index, seed) for index, problem in enumerate(interleave(generate(families, per_family, seed)))
    ]
    train, val = write_train_val(rows, out_dir, val_count)
    write_jsonl(rows, out_dir / "problems.jsonl")
    return train, val


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cleaner.data.tool_arithmetic", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated family names")
    parser.add_argument("--per-family", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--val-count", type=int, default=2)
    args = parser.parse_args(argv)
    return print_paths(
        lambda: write_set(args.out_dir, args.families.split(","), args.per_family, args.seed, args.val_count)
    )


if __name__ == "__main__":
    sys.exit(main())
