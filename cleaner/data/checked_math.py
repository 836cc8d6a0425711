"""Generated integer-answer math problems, each answer computed two independent ways: the purification benchmark's
problem set beside the bundled demo problems.

A small model solves these by writing a few lines of code, and gets them wrong sometimes for the reasons code
goes wrong: an inclusive bound read as exclusive, a coin counted in two orders, a calendar rule missed. Unlike
the bundled problems written to make code fail (`math-06..12`, whose plain code exceeds Python's 4,300-digit
limit of `int` to `str` conversion), nothing here needs a workaround: a failed call on them is an ordinary bug.

Each family draws its parameters from `random.Random(seed)` and computes the answer by the plain loop that
defines it and by a second method that shares no code with the loop (a closed formula, a dynamic programme, a
sieve); `generate` refuses a problem whose two answers differ, so every answer in the file is checked.

Every row carries `extra_info.family`: `written-to-fail` for the bundled problems written to make code fail,
`other` for the rest (the purification table reports the two apart).
Usage: `python -m cleaner.data.checked_math OUT.jsonl [--count N] [--seed S]` writes the bundled problems and
N generated ones, shuffled (what `benchmarks/data/purification_problems.jsonl` holds).
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from cleaner.data.rows import read_rows, write_jsonl
from cleaner.data.tool_arithmetic import python_block_row

DATA_SOURCE = "checked-math"
WRITTEN_TO_FAIL = "written-to-fail"
OTHER = "other"
# The bundled problems written to make small models' code fail (docs/demo.md, "The bundled problems").
WRITTEN_TO_FAIL_IDS = frozenset(f"math-{i:02d}" for i in range(6, 13))
DEFAULT_COUNT = 30
DEFAULT_SEED = 0


@dataclass(frozen=True)
class Checked:
    """A question and its answer by two methods."""

    family: str
    question: str
    by_definition: int  # the plain loop over what the question defines
    by_second_method: int  # a formula, sieve or dynamic programme that shares no code with the loop


class UncheckedAnswer(ValueError):
    """The two methods disagree: a family's code is wrong, the problem is not written."""


def prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while p * p <= n:
        if n % p == 0:
            factors.append(p)
            while n % p == 0:
                n //= p
        p += 1
    return factors + ([n] if n > 1 else [])


def coprime_count(rng: random.Random) -> Checked:
    limit, modulus = rng.randint(2000, 9000), rng.choice([210, 330, 390, 462, 546, 770, 858, 910, 1155])
    loop = sum(1 for k in range(1, limit + 1) if math.gcd(k, modulus) == 1)
    primes = prime_factors(modulus)
    inclusion_exclusion = sum(
        (-1) ** size * (limit // math.prod(subset))
        for size in range(len(primes) + 1)
        for subset in combinations(primes, size)
    )
    question = f"How many integers from 1 to {limit} inclusive share no common factor greater than 1 with {modulus}?"
    return Checked("coprime_count", question, loop, inclusion_exclusion)


def coin_change(rng: random.Random) -> Checked:
    amount = rng.randint(120, 300)
    coins = (1, 5, 10, 25, 50)
    loop = sum(
        1
        for halves in range(amount // 50 + 1)
        for quarters in range((amount - 50 * halves) // 25 + 1)
        for dimes in range((amount - 50 * halves - 25 * quarters) // 10 + 1)
        for _nickels in range((amount - 50 * halves - 25 * quarters - 10 * dimes) // 5 + 1)
    )  # the pennies make up the rest, one way
    ways = [1] + [0] * amount
    for coin in coins:
        for total in range(coin, amount + 1):
            ways[total] += ways[total - coin]
    question = (
        f"In how many ways can {amount} cents be made from coins of 1, 5, 10, 25 and 50 cents, "
        "if only how many coins of each value are used matters (not their order)?"
    )
    return Checked("coin_change", question, loop, ways[amount])


def lattice_points(rng: random.Random) -> Checked:
    radius = rng.randint(40, 150)
    loop = sum(
        1 for x in range(-radius, radius + 1) for y in range(-radius, radius + 1) if x * x + y * y <= radius * radius
    )
    columns = sum(2 * math.isqrt(radius * radius - x * x) + 1 for x in range(-radius, radius + 1))
    question = (
        f"How many points (x, y) with integer coordinates satisfy x^2 + y^2 <= {radius}^2 "
        "(points on the circle included)?"
    )
    return Checked("lattice_points", question, loop, columns)


def derangements(rng: random.Random) -> Checked:
    n = rng.randint(9, 16)
    count = [1, 0]
    for k in range(2, n + 1):
        count.append((k - 1) * (count[k - 1] + count[k - 2]))
    formula = sum((-1) ** k * math.factorial(n) // math.factorial(k) for k in range(n + 1))
    question = f"In how many ways can {n} letters be put into their {n} addressed envelopes so that no letter is in its own envelope?"
    return Checked("derangements", question, count[n], formula)


def totient_sum(rng: random.Random) -> Checked:
    limit = rng.randint(500, 1500)
    loop = sum(sum(1 for k in range(1, n + 1) if math.gcd(k, n) == 1) for n in range(1, limit + 1))
    phi = list(range(limit + 1))
    for p in range(2, limit + 1):
        if phi[p] == p:  # p is prime: no smaller prime has touched it
            for multiple in range(p, limit + 1, p):
                phi[multiple] -= phi[multiple] // p
    question = f"What is the sum of Euler's totient phi(n) over n = 1, 2, ..., {limit}, with phi(1) = 1?"
    return Checked("totient_sum", question, loop, sum(phi[1:]))


def palindromes(rng: random.Random) -> Checked:
    low = rng.randint(1000, 40000)
    high = low + rng.randint(50000, 400000)
    loop = sum(1 for k in range(low, high + 1) if str(k) == str(k)[::-1])

    def built(digits: int) -> list[int]:  # every palindrome of `digits` digits, from its first half
        half = (digits + 1) // 2
        values = []
        for first in range(10 ** (half - 1), 10**half):
            text = str(first)
            values.append(int(text + text[: digits - half][::-1]))
        return values

    constructed = sum(
        1 for digits in range(len(str(low)), len(str(high)) + 1) for v in built(digits) if low <= v <= high
    )
    question = f"How many integers from {low} to {high} inclusive read the same forwards and backwards in base 10?"
    return Checked("palindromes", question, loop, constructed)


def binary_ones(rng: random.Random) -> Checked:
    limit, ones = rng.randint(100000, 900000), rng.randint(4, 9)
    loop = sum(1 for k in range(1, limit + 1) if bin(k).count("1") == ones)
    # Numbers below limit + 1 with `ones` set bits: at each set bit of limit + 1, put a 0 there and choose the rest.
    bound, counted, seen = limit + 1, 0, 0
    for position in range(bound.bit_length() - 1, -1, -1):
        if bound >> position & 1:
            if ones - seen >= 0:
                counted += math.comb(position, ones - seen)
            seen += 1
    question = f"How many integers from 1 to {limit} inclusive have exactly {ones} ones in their binary representation?"
    return Checked("binary_ones", question, loop, counted)


def digit_sum_count(rng: random.Random) -> Checked:
    limit, target = rng.randint(100000, 999999), rng.randint(15, 35)
    loop = sum(1 for k in range(1, limit + 1) if sum(map(int, str(k))) == target)
    digits = list(map(int, str(limit)))

    def ways(
        length: int, total: int
    ) -> int:  # digit strings of `length` digits (leading zeros allowed) summing to total
        table = [1] + [0] * total
        for _ in range(length):
            table = [sum(table[t - d] for d in range(10) if t - d >= 0) for t in range(total + 1)]
        return table[total]

    counted, prefix = 0, 0  # numbers 0..limit with the digit sum; 0 never has a positive target
    for index, digit in enumerate(digits):
        for smaller in range(digit):
            if target - prefix - smaller >= 0:
                counted += ways(len(digits) - index - 1, target - prefix - smaller)
        prefix += digit
    counted += prefix == target
    question = f"How many integers from 1 to {limit} inclusive have decimal digits that add up to {target}?"
    return Checked("digit_sum_count", question, loop, counted)


def stirling_partitions(rng: random.Random) -> Checked:
    n = rng.randint(10, 16)
    k = rng.randint(3, 6)
    table = [[0] * (k + 1) for _ in range(n + 1)]
    table[0][0] = 1
    for i in range(1, n + 1):
        for j in range(1, k + 1):
            table[i][j] = j * table[i - 1][j] + table[i - 1][j - 1]
    formula = sum((-1) ** (k - j) * math.comb(k, j) * j**n for j in range(k + 1)) // math.factorial(k)
    question = f"In how many ways can a set of {n} distinct objects be split into exactly {k} non-empty groups (the groups unlabelled)?"
    return Checked("stirling_partitions", question, table[n][k], formula)


def squarefree_count(rng: random.Random) -> Checked:
    limit = rng.randint(50000, 300000)
    squares = [p * p for p in range(2, math.isqrt(limit) + 1)]
    sieve = [True] * (limit + 1)
    for square in squares:
        for multiple in range(square, limit + 1, square):
            sieve[multiple] = False
    loop = sum(sieve[1:])
    mobius = [1] * (math.isqrt(limit) + 1)
    for d in range(2, len(mobius)):
        for p in prime_factors(d):
            mobius[d] *= 0 if d % (p * p) == 0 else -1
    formula = sum(mobius[d] * (limit // (d * d)) for d in range(1, len(mobius)))
    question = f"How many integers from 1 to {limit} inclusive are not divisible by the square of any prime?"
    return Checked("squarefree_count", question, loop, formula)


def sunday_firsts(rng: random.Random) -> Checked:
    first = rng.randint(1901, 1990)
    last = first + rng.randint(10, 60)
    loop = sum(
        1
        for year in range(first, last + 1)
        for month in range(1, 13)
        if datetime.date(year, month, 1).weekday() == 6  # Monday is 0
    )

    def zeller(year: int, month: int) -> int:  # 1 = Sunday, for the 1st of the month (Zeller's congruence)
        if month < 3:
            month, year = month + 12, year - 1
        return (1 + 13 * (month + 1) // 5 + year % 100 + year % 100 // 4 + year // 400 - 2 * (year // 100)) % 7

    by_formula = sum(1 for year in range(first, last + 1) for month in range(1, 13) if zeller(year, month) == 1)
    question = (
        f"How many months from January {first} to December {last} inclusive begin on a Sunday (the Gregorian calendar)?"
    )
    return Checked("sunday_firsts", question, loop, by_formula)


FAMILIES: dict[str, Callable[[random.Random], Checked]] = {
    function.__name__: function
    for function in (
        coprime_count,
        coin_change,
        lattice_points,
        derangements,
        totient_sum,
        palindromes,
        binary_ones,
        digit_sum_count,
        stirling_partitions,
        squarefree_count,
        sunday_firsts,
    )
}


def generate(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> list[Checked]:
    """`count` problems, the families in turn, each answer checked; distinct questions."""
    rng = random.Random(seed)
    names = sorted(FAMILIES)
    problems: list[Checked] = []
    questions: set[str] = set()
    while len(problems) < count:
        checked = FAMILIES[names[len(problems) % len(names)]](rng)
        if checked.by_definition != checked.by_second_method:
            raise UncheckedAnswer(
                f"{checked.family}: {checked.question!r} gives {checked.by_definition} by its definition and "
                f"{checked.by_second_method} by the second method"
            )
        if checked.question not in questions:
            questions.add(checked.question)
            problems.append(checked)
    return problems


def row(checked: Checked, index: int) -> dict[str, Any]:
    """A verl RLHF row in the bundled demo problems' format."""
    extra_info = {"index": index, "problem_id": f"checked-{index:02d}", "family": OTHER, "kind": checked.family}
    return python_block_row(DATA_SOURCE, checked.question, checked.by_definition, extra_info)


def family_of_bundled(problem_id: str) -> str:
    return WRITTEN_TO_FAIL if problem_id in WRITTEN_TO_FAIL_IDS else OTHER


def problem_set(bundled: Path, count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """The bundled problems, each labelled with its family, and `count` generated ones, shuffled by `seed`: a
    rollout stopped early (problems run in file order) still covers every family."""
    rows = []
    for bundled_row in read_rows(bundled):
        extra_info = dict(bundled_row["extra_info"])
        extra_info["family"] = family_of_bundled(str(extra_info["problem_id"]))
        rows.append({**bundled_row, "extra_info": extra_info})
    rows += [row(checked, index) for index, checked in enumerate(generate(count, seed))]
    random.Random(seed).shuffle(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    from cleaner.resources import DEMO_PROBLEMS, resource_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSONL file to write")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help="generated problems after the bundled ones")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    write_jsonl(problem_set(resource_path(DEMO_PROBLEMS), args.count, args.seed), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
