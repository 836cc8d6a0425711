"""pass@k and majority vote against values computed by hand and by the binomial formula."""

from __future__ import annotations

from math import comb

import pytest

from cleaner.evaluation.pass_at_k import majority_correct, pass_at_k, report_ks


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 0.7),
        (4, 1, 2, 0.5),
        (16, 0, 8, 0.0),
        (16, 16, 1, 1.0),
        (10, 9, 2, 1.0),
        (3, 1, 3, 1.0),
    ],
)
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_the_binomial_definition():
    for n in (1, 10, 16, 32):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_pass_at_1_is_the_mean_accuracy():
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_majority_vote():
    assert majority_correct(["4", "4", "5"], [True, True, False]) == 1.0
    assert majority_correct(["5", "4", "5"], [False, True, False]) == 0.0
    assert majority_correct(["4", "5"], [True, False]) == 0.5  # a tie: half the tied answers are right
    assert majority_correct([None, "", "7"], [False, False, True]) == 1.0  # no answer, no vote
    assert majority_correct([None, None], [False, False]) == 0.0


def test_reported_ks():
    assert report_ks(16) == [1, 2, 4, 8, 16]
    assert report_ks(10) == [1, 2, 4, 8, 10]
    assert report_ks(1) == [1]
