"""Math rewards: boxed answers judged by math-verify in a supervised process pool, or strictly."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from cleaner.rewards import compute_score
from cleaner.rewards.math_verify_pool import MathVerdict, MathVerifyPool

pytestmark = pytest.mark.timeout(120)
# The process-pool tests that kill or wait out a worker take seconds each.
slow = pytest.mark.slow


def answer(text: str) -> str:
    return f"<think>\nworking\n</think>\n\nTherefore the answer is {text}."


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("\\boxed{204}", "204"),  # AIME-style integer
        ("\\boxed{033}", "33"),
        ("\\boxed{\\frac12}", "0.5"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sqrt{2}/2"),
        ("\\boxed{1+x^2}", "x^2+1"),
        ("\\boxed{1,000}", "1000"),
        ("\\boxed{x = 3}", "3"),
        ("\\boxed{5}", "\\boxed{5}"),  # gold stored boxed
    ],
)
async def test_equivalent_answers_score_plus_one(pred, gold):
    result = await compute_score("math_dapo", answer(pred), gold)
    assert result["score"] == 1.0 and result["acc"] is True and result["reason"] == "correct"


@pytest.mark.parametrize(
    "response, gold, reason, pred",
    [
        (answer("\\boxed{205}"), "204", "wrong_answer", "205"),
        (answer("\\boxed{\\frac{1}{3}}"), "0.5", "wrong_answer", "\\frac{1}{3}"),
        (answer("204"), "204", "no_answer", ""),  # not boxed
        (answer("\\boxed{}"), "204", "no_answer", ""),
        ("<think>\nit is \\boxed{204}", "204", "no_answer", ""),  # cut off while reasoning
        (answer("\\boxed{\\text{}}"), "204", "unparsable", "\\text{}"),
    ],
)
async def test_wrong_or_missing_answers_score_minus_one(response, gold, reason, pred):
    result = await compute_score("AIME2025", response, gold)
    assert result == {
        "score": -1.0,
        "acc": False,
        "pred": pred,
        "reason": reason,
        "infra_error": False,
        "tests_passed": 0,
        "tests_total": 0,
    }


async def test_numeric_ground_truths_including_numpy_scalars():
    import numpy as np

    assert (await compute_score("AIME2024", answer("\\boxed{24}"), 24))["acc"]
    assert (await compute_score("AIME2024", answer("\\boxed{24}"), np.int64(24)))["acc"]
    with pytest.raises(ValueError, match="AIME2024.*must be a string or a number"):
        await compute_score("AIME2024", answer("\\boxed{24}"), ["24"])


async def test_strict_mode_is_the_reference_exact_string_match():
    assert (await compute_score("math_dapo", answer("\\boxed{204}"), "204", math_equivalence="strict"))["acc"]
    result = await compute_score("math_dapo", answer("\\boxed{\\frac12}"), "0.5", math_equivalence="strict")
    assert result["score"] == -1.0 and result["reason"] == "wrong_answer"


async def test_a_ground_truth_math_verify_cannot_read_needs_an_exact_match():
    assert (await compute_score("mega-science", answer("\\boxed{\\text{}}"), "\\text{}"))["acc"]
    assert (await compute_score("mega-science", answer("\\boxed{5}"), "\\text{}"))["reason"] == "wrong_answer"


@pytest.mark.parametrize(
    "source",
    [
        "math_dapo",
        "AIME2024",
        "train-math-deepscaler",
        "train-math-numinamath1.5_olympiads",
        "mega-science",
        "train-math-still3",
        "train-math-omnimath",
        "train-math-aime19832023",
    ],
)
async def test_every_training_math_source_is_scored_as_math(source):
    assert (await compute_score(source, answer("\\boxed{2}"), "2"))["acc"]


async def test_math_verify_works_from_a_worker_thread_with_its_own_event_loop():
    # verl calls rewards off the main thread, where math-verify's signal.alarm raises.
    results: list[dict] = []

    def in_thread() -> None:
        results.append(asyncio.run(compute_score("math_dapo", answer("\\boxed{\\frac12}"), "0.5")))

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(timeout=60)
    assert results and results[0]["acc"] is True


async def test_many_concurrent_checks_under_asyncio():
    results = await asyncio.gather(
        *(compute_score("math_dapo", answer(f"\\boxed{{{i}}}"), str(i if i % 2 else i + 1)) for i in range(100))
    )
    assert [r["acc"] for r in results] == [bool(i % 2) for i in range(100)]


def run_on_one_worker_pool(scenario, timeout_s: float) -> None:
    """Run `scenario(pool)` on its own one-worker pool (not the shared one), closing the pool whatever happens."""
    pool = MathVerifyPool(workers=1, timeout_s=timeout_s)
    try:
        asyncio.run(scenario(pool))
    finally:
        pool.close()


async def freeze_the_worker(pool: MathVerifyPool) -> int:
    """Start the pool's only worker, then stop it, like C code that ignores math-verify's alarm; its pid."""
    await pool.check("1", "1")
    (pid,) = pool.worker_pids
    os.kill(pid, signal.SIGSTOP)
    return pid


@slow
def test_a_stuck_check_is_killed_at_the_hard_limit_and_the_pool_recovers():
    async def scenario(pool: MathVerifyPool) -> None:
        pid = await freeze_the_worker(pool)
        started = time.monotonic()
        assert await pool.check("2", "2") is MathVerdict.TIMEOUT
        # Not before the limit; the upper bound is generous (a loaded machine wakes the supervisor late).
        assert 1.0 <= time.monotonic() - started < 30.0
        assert pool.worker_pids != [pid]
        assert await pool.check("\\frac12", "0.5") is MathVerdict.EQUIVALENT

    run_on_one_worker_pool(scenario, timeout_s=1.0)


@slow
def test_a_worker_that_dies_mid_check_is_reported_and_replaced():
    async def scenario(pool: MathVerifyPool) -> None:
        pid = await freeze_the_worker(pool)
        check = pool.submit("2", "2")
        while not check.running():  # the supervisor marks a check running as it hands it to the (frozen) worker
            await asyncio.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        assert MathVerdict(await asyncio.wrap_future(check)) is MathVerdict.CRASHED
        assert await pool.check("3", "4") is MathVerdict.DIFFERENT

    run_on_one_worker_pool(scenario, timeout_s=30.0)


@slow
def test_queue_time_does_not_count_against_the_limit():
    async def scenario(pool: MathVerifyPool) -> None:
        await freeze_the_worker(pool)
        started = time.monotonic()
        stuck = asyncio.ensure_future(pool.check("2", "2"))
        queued = asyncio.ensure_future(pool.check("\\frac12", "0.5"))
        assert await stuck is MathVerdict.TIMEOUT
        # `queued` waited behind the stuck check for longer than the hard limit (0.5 s + 1 s grace),
        # then for the replacement worker to start, and still gets its real verdict
        assert await queued is MathVerdict.EQUIVALENT
        assert time.monotonic() - started > 1.5

    run_on_one_worker_pool(scenario, timeout_s=0.5)


def test_a_closed_pool_refuses_checks_with_a_clear_error():
    pool = MathVerifyPool(workers=1, timeout_s=1.0)
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit("1", "1")
