"""Reward and tool throughput: math answers/s, code answers/s on a real judge, tool calls/s at 64 trajectories.

    .venv/bin/python benchmarks/reward_bench.py [--math-answers 1000] [--code-answers 100] [--tests 10]
                                                [--trajectories 64] [--calls-per-trajectory 8] [--judge-workers N]

Starts its own `code-judge serve` (embedded Redis, bubblewrap sandbox) on a free loopback port and stops it at
the end. Prints one markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from cleaner.rewards import compute_score
from code_judge.local import local_judge

# (model's boxed answer, ground truth): equivalent forms, wrong answers and an answer without a box.
MATH_CASES = [
    ("\\boxed{204}", "204"),
    ("\\boxed{\\frac12}", "0.5"),
    ("\\boxed{\\dfrac{3}{4}}", "0.75"),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sqrt{2}/2"),
    ("\\boxed{1+x^2}", "x^2+1"),
    ("\\boxed{205}", "204"),
    ("\\boxed{\\frac{1}{3}}", "0.5"),
    ("204", "204"),
]
SUM_PROGRAM = "a, b = map(int, input().split())\nprint({expr})"
CODE_VARIANTS = (
    [SUM_PROGRAM.format(expr="a + b")] * 7 + [SUM_PROGRAM.format(expr="a - b")] * 2 + ["raise ValueError(1)"]
)
TOOL_CELLS = [
    "print(sum(range(100)))",
    "x = [i * i for i in range(50)]\nx[-1]",
    "1 / 0",
    "import math\nmath.factorial(20)",
]


@dataclass(frozen=True)
class Row:
    workload: str
    items: int
    seconds: float
    unit: str
    note: str = ""

    def line(self) -> str:
        rate = self.items / self.seconds if self.seconds > 0 else float("inf")
        return f"| {self.workload} | {self.items} | {self.seconds:.2f} | {rate:,.1f} {self.unit}/s | {self.note} |"


@contextmanager
def running_judge(workers: int | None) -> Iterator[str]:
    """A private `code-judge serve` on loopback, stopped (and reaped) on exit."""
    with (
        tempfile.TemporaryDirectory(prefix="reward-bench-") as tmp,
        local_judge(Path(tmp) / "judge.log", workers) as url,
    ):
        yield url


async def timed_gather(label: str, jobs: list[Awaitable]) -> tuple[float, list]:
    """Run all jobs concurrently (as verl's reward loop does for a batch), with a progress bar."""
    started = time.perf_counter()
    tasks = [asyncio.ensure_future(job) for job in jobs]
    with tqdm(total=len(tasks), desc=label, unit="item", leave=False) as bar:
        for task in tasks:
            task.add_done_callback(lambda _: bar.update())
        results = await asyncio.gather(*tasks)
    return time.perf_counter() - started, results


async def bench_math(answers: int) -> list[Row]:
    started = time.perf_counter()
    await compute_score("math_dapo", "\\boxed{1}", "1")  # starts the worker processes
    startup = time.perf_counter() - started
    cases = [MATH_CASES[i % len(MATH_CASES)] for i in range(answers)]
    rows = []
    for mode in ("math_verify", "strict"):
        jobs = [
            compute_score("math_dapo", f"<think>\nok\n</think>\n\nAnswer: {pred}", gold, math_equivalence=mode)
            for pred, gold in cases
        ]
        seconds, results = await timed_gather(f"math ({mode})", jobs)
        correct = sum(r["acc"] for r in results)
        note = f"{correct} correct; pool start-up {startup:.2f} s" if mode == "math_verify" else f"{correct} correct"
        rows.append(Row(f"math rewards, {mode}", answers, seconds, "rewards", note))
    return rows


async def bench_code(url: str, answers: int, tests: int) -> list[Row]:
    ground_truth = {
        "inputs": [f"{i} {2 * i}\n" for i in range(tests)],
        "outputs": [f"{3 * i}\n" for i in range(tests)],
    }
    jobs = [
        compute_score(
            "train-code-taco-easy",
            f"Solution:\n```python\n{CODE_VARIANTS[i % len(CODE_VARIANTS)]}\n```",
            ground_truth,
            judge_url=url,
        )
        for i in range(answers)
    ]
    seconds, results = await timed_gather("code", jobs)
    infra = sum(r["infra_error"] for r in results)
    passed = sum(r["tests_passed"] for r in results)
    return [
        Row(
            f"code rewards ({tests} tests each)",
            answers,
            seconds,
            "rewards",
            f"{passed} tests passed; {infra} infra errors",
        ),
        Row("  judge runs inside them", answers * tests, seconds, "runs"),
    ]


async def bench_tool(url: str, trajectories: int, calls_per_trajectory: int) -> list[Row]:
    from cleaner.tools.judge_client import shared_judge_client
    from cleaner.verl.code_interpreter_tool import CodeInterpreterTool

    tool = CodeInterpreterTool({"type": "native", "judge_url": url})
    latencies: list[float] = []

    async def trajectory(index: int) -> None:
        # One rollout: its tool calls come one after another, each after the "model" produced it.
        for turn in range(calls_per_trajectory):
            started = time.perf_counter()
            await tool.execute(f"traj-{index}-{turn}", {"code": TOOL_CELLS[(index + turn) % len(TOOL_CELLS)]})
            latencies.append(time.perf_counter() - started)

    seconds, _ = await timed_gather("tool", [trajectory(i) for i in range(trajectories)])
    stats = shared_judge_client(tool.settings.judge).stats
    latencies.sort()
    p50, p95 = statistics.median(latencies), latencies[int(0.95 * (len(latencies) - 1))]
    note = (
        f"{trajectories} concurrent trajectories; latency p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms; "
        f"{stats.submissions / max(stats.http_requests, 1):.1f} calls per HTTP request"
    )
    return [Row("tool calls (code_interpreter)", len(latencies), seconds, "calls", note)]


async def run(args: argparse.Namespace) -> list[Row]:
    rows = await bench_math(args.math_answers)
    with running_judge(args.judge_workers) as url:
        rows += await bench_code(url, args.code_answers, args.tests)
        rows += await bench_tool(url, args.trajectories, args.calls_per_trajectory)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--math-answers", type=int, default=1000)
    parser.add_argument("--code-answers", type=int, default=100)
    parser.add_argument("--tests", type=int, default=10, help="hidden tests per code answer")
    parser.add_argument("--trajectories", type=int, default=64)
    parser.add_argument("--calls-per-trajectory", type=int, default=8)
    parser.add_argument("--judge-workers", type=int, default=None, help="judge worker processes (default: its own)")
    args = parser.parse_args()
    rows = asyncio.run(run(args))
    print(f"\nreward_bench on {os.cpu_count()} CPU(s)\n")
    print("| workload | items | seconds | throughput | notes |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(row.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
