"""Sample-level metrics: unbiased pass@k and majority vote.

pass@k follows the unbiased estimator 1 - C(n-c, k) / C(n, k) over n samples with c correct (the
reference reported a bootstrap `best@k`, which comes out slightly lower).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def pass_at_k(n: int, correct: int, k: int) -> float:
    if not 0 <= correct <= n:
        raise ValueError(f"pass_at_k: correct={correct} is outside 0..n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} is outside 1..n={n}")
    if n - correct < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k/i): the binomial ratio without huge intermediate numbers.
    failure = 1.0
    for i in range(n - correct + 1, n + 1):
        failure *= 1.0 - k / i
    return 1.0 - failure


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """Whether the most frequent answer is correct; ties count as the share of correct tied answers.

    Samples with no answer (None or "") do not vote; with no votes at all the result is 0.
    """
    if len(answers) != len(correct):
        raise ValueError("majority_correct: answers and correct differ in length")
    votes = Counter(answer for answer in answers if answer)
    if not votes:
        return 0.0
    top = max(votes.values())
    leaders = [answer for answer, count in votes.items() if count == top]
    right = {answer for answer, ok in zip(answers, correct) if answer and ok}
    return sum(answer in right for answer in leaders) / len(leaders)


def report_ks(n: int) -> list[int]:
    """The k values reported for n samples: powers of two up to n, and n itself."""
    ks = []
    k = 1
    while k <= n:
        ks.append(k)
        k *= 2
    if ks[-1] != n:
        ks.append(n)
    return ks
