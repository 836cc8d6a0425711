"""The purification benchmark's generated problems: every answer checked two ways, known values reproduced, the
committed problem file what the generator writes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cleaner.data import checked_math
from cleaner.data.checked_math import (
    FAMILIES,
    OTHER,
    WRITTEN_TO_FAIL,
    UncheckedAnswer,
    generate,
    problem_set,
)
from cleaner.data.rows import read_rows
from cleaner.resources import DEMO_PROBLEMS, resource_path
from cleaner.rollout.problems import load_problems

PROBLEM_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "purification_problems.jsonl"


class Drawn(random.Random):
    """A generator whose `randint` and `choice` return the given values in order: a family at chosen parameters."""

    def __init__(self, *values):
        super().__init__(0)
        self.values = list(values)

    def randint(self, low, high):
        return self.values.pop(0)

    def choice(self, options):
        return self.values.pop(0)


@pytest.mark.parametrize("seed", [1, 2])
def test_every_generated_answer_agrees_with_the_second_method(seed):
    problems = generate(count=3 * len(FAMILIES), seed=seed)
    assert {problem.family for problem in problems} == set(FAMILIES)
    assert all(problem.by_definition == problem.by_second_method for problem in problems)
    assert len({problem.question for problem in problems}) == len(problems)


@pytest.mark.parametrize(
    ("family", "parameters", "published"),
    [
        ("sunday_firsts", (1901, 99), 171),  # Project Euler 19: Sundays on the first of a month, 1901-2000
        ("coin_change", (100,), 292),  # change for a dollar in 1, 5, 10, 25, 50 cents (SICP 1.2.2)
        ("lattice_points", (10,), 317),  # Gauss's circle problem, N(10) (OEIS A000328)
        ("derangements", (10,), 1334961),  # !10 (OEIS A000166)
        ("stirling_partitions", (10, 3), 9330),  # S(10, 3) (OEIS A000392)
        ("squarefree_count", (100,), 61),  # squarefree numbers up to 100 (OEIS A013928)
        ("totient_sum", (100,), 3044),  # sum of phi(n), n <= 100 (OEIS A002088)
        ("coprime_count", (100, 210), 22),  # 1 and the primes from 11 to 97
    ],
)
def test_families_give_published_values(family, parameters, published):
    checked = FAMILIES[family](Drawn(*parameters))
    assert checked.by_definition == checked.by_second_method == published


def test_binary_ones_and_digit_sums_match_a_count_by_hand():
    ones = FAMILIES["binary_ones"](Drawn(16, 1))  # 1, 2, 4, 8, 16
    assert ones.by_definition == ones.by_second_method == 5
    digits = FAMILIES["digit_sum_count"](Drawn(100, 2))  # 2, 11 and 20
    assert digits.by_definition == digits.by_second_method == 3
    palindromes = FAMILIES["palindromes"](Drawn(10, 100))  # 11, 22, ..., 99 and 101
    assert palindromes.question.startswith("How many integers from 10 to 110 ")
    assert palindromes.by_definition == palindromes.by_second_method == 10


def test_a_family_whose_methods_disagree_is_refused(monkeypatch):
    def wrong(rng):
        return checked_math.Checked("wrong", "What is 1 + 1?", 2, 3)

    monkeypatch.setattr(checked_math, "FAMILIES", {"wrong": wrong})
    with pytest.raises(UncheckedAnswer, match="gives 2 by its definition and 3"):
        generate(count=1)


def test_the_committed_problem_file_is_the_generators_output():
    assert read_rows(PROBLEM_FILE) == problem_set(resource_path(DEMO_PROBLEMS))


def test_the_problem_set_labels_families_and_loads_as_rollout_problems():
    problems = load_problems(PROBLEM_FILE)
    bundled = load_problems(resource_path(DEMO_PROBLEMS))
    assert len(problems) >= 48
    assert {p.problem_id for p in bundled} < {p.problem_id for p in problems}
    families = {p.problem_id: p.extra_info["family"] for p in problems}
    assert sorted(i for i, family in families.items() if family == WRITTEN_TO_FAIL) == [
        f"math-{i:02d}" for i in range(6, 13)
    ]
    assert set(families.values()) == {WRITTEN_TO_FAIL, OTHER}
    generated = [p for p in problems if p.data_source == checked_math.DATA_SOURCE]
    assert all(str(int(p.ground_truth)) == p.ground_truth for p in generated)
