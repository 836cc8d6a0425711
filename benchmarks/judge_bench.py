"""Drive any service with the code-judge HTTP API with a fixed workload and print a table per phase.

Workload (820 programs): 500 tiny prints, 200 CPU loops of ~30 ms, 50 infinite loops, 50 uncaught exceptions,
20 programs allocating 4 GiB. Each kind runs alone (phased), then all 820 run again in shuffled order. Every
program goes to `/judge` (one request each) at a fixed client concurrency. A verdict is correct when it is the
real one: prints and loops succeed with the expected output, infinite loops end in `worker_timeout` with a cost
within `--timeout-tolerance` of `--time-limit`, exceptions and 4 GiB allocations fail with reason "".

    python benchmarks/judge_bench.py --url http://127.0.0.1:8088 [--concurrency 32] [--time-limit 10]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

import aiohttp
from tqdm import tqdm

_CPU_LOOP_ITERATIONS = 1_000_000  # ~30 ms of CPython 3.11 on a 2020s core
PHASES = ("tiny", "cpu", "infinite", "exception", "alloc_4g", "shuffled")


@dataclass(frozen=True)
class Program:
    kind: str
    source: str
    expected_output: str | None


@dataclass
class Outcome:
    program: Program
    latency_s: float
    verdict: dict | None
    error: str | None = None


@dataclass
class PhaseReport:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0


def workload() -> list[Program]:
    programs = [Program("tiny", f"print({i})", f"{i}\n") for i in range(500)]
    for i in range(200):
        n = _CPU_LOOP_ITERATIONS + i
        source = f"s = 0\nfor i in range({n}):\n    s += i\nprint(s)"
        programs.append(Program("cpu", source, f"{n * (n - 1) // 2}\n"))
    programs += [Program("infinite", f"i = {i}\nwhile True:\n    i += 1", None) for i in range(50)]
    programs += [Program("exception", f"x = {i}\nraise ValueError('bad value', x)", None) for i in range(50)]
    programs += [
        Program("alloc_4g", f"block = bytearray(4 * 1024 ** 3)  # {i}\nprint(len(block))", None) for i in range(20)
    ]
    return programs


def is_correct(outcome: Outcome, time_limit: float, tolerance: float) -> bool:
    v = outcome.verdict
    if v is None:
        return False
    kind = outcome.program.kind
    if kind in ("tiny", "cpu"):
        return v["success"] is True and v["reason"] == ""
    if kind == "infinite":
        return (
            v["run_success"] is False and v["reason"] == "worker_timeout" and abs(v["cost"] - time_limit) <= tolerance
        )
    if kind == "exception":
        return v["run_success"] is False and v["reason"] == "" and v.get("exception_type", "ValueError") == "ValueError"
    return v["run_success"] is False and v["reason"] == ""  # alloc_4g: MemoryError or a memory-limit kill


async def judge_one(session: aiohttp.ClientSession, url: str, program: Program) -> Outcome:
    body = {"type": "python", "solution": program.source}
    if program.expected_output is not None:
        body["expected_output"] = program.expected_output
    started = time.perf_counter()
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                text = await response.text()
                return Outcome(program, time.perf_counter() - started, None, f"HTTP {response.status}: {text[:200]}")
            verdict = await response.json()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return Outcome(program, time.perf_counter() - started, None, f"{type(exc).__name__}: {exc}")
    return Outcome(program, time.perf_counter() - started, verdict)


async def run_phase(name: str, programs: list[Program], url: str, concurrency: int, timeout_s: float) -> PhaseReport:
    report = PhaseReport(name)
    semaphore = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        progress = tqdm(total=len(programs), desc=name, unit="req", leave=False, file=sys.stderr)

        async def bounded(program: Program) -> None:
            async with semaphore:
                report.outcomes.append(await judge_one(session, url, program))
            progress.update()

        started = time.perf_counter()
        await asyncio.gather(*(bounded(p) for p in programs))
        report.wall_s = time.perf_counter() - started
        progress.close()
    return report


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def print_table(reports: list[PhaseReport], time_limit: float, tolerance: float) -> None:
    header = (
        f"| {'phase':<10} | {'n':>4} | {'req/s':>7} | {'p50 ms':>8} | {'p95 ms':>8} | {'p99 ms':>8} | {'correct':>9} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for report in reports:
        latencies = [o.latency_s * 1000 for o in report.outcomes]
        correct = sum(is_correct(o, time_limit, tolerance) for o in report.outcomes)
        n = len(report.outcomes)
        print(
            f"| {report.name:<10} | {n:>4} | {n / report.wall_s:>7.1f} | {percentile(latencies, 50):>8.1f} | "
            f"{percentile(latencies, 95):>8.1f} | {percentile(latencies, 99):>8.1f} | {correct:>4}/{n:<4} |"
        )


def print_details(reports: list[PhaseReport], time_limit: float, tolerance: float) -> None:
    timeouts = [o for r in reports for o in r.outcomes if o.program.kind == "infinite" and o.verdict]
    if timeouts:
        deviations = [abs(o.verdict["cost"] - time_limit) for o in timeouts]
        worst, median = max(deviations), statistics.median(deviations)
        print(f"\ninfinite loops: |cost - {time_limit:g} s| max {worst:.3f} s, median {median:.3f} s")
    wrong = [(r.name, o) for r in reports for o in r.outcomes if not is_correct(o, time_limit, tolerance)]
    for phase, o in wrong[:10]:
        shown = o.error or {
            k: o.verdict.get(k) for k in ("success", "run_success", "reason", "cost", "exception_type", "limit")
        }
        print(f"wrong ({phase}/{o.program.kind}): {shown}")
    if len(wrong) > 10:
        print(f"... and {len(wrong) - 10} more wrong verdicts")


async def main_async(args: argparse.Namespace) -> int:
    url = args.url.rstrip("/") + args.endpoint
    programs = workload()
    reports = []
    for kind in args.phases.split(","):
        if kind == "shuffled":
            phase = programs[:]
            random.Random(args.seed).shuffle(phase)
        else:
            phase = [p for p in programs if p.kind == kind]
        reports.append(await run_phase(kind, phase, url, args.concurrency, args.request_timeout))
    print_table(reports, args.time_limit, args.timeout_tolerance)
    print_details(reports, args.time_limit, args.timeout_tolerance)
    return 0 if all(is_correct(o, args.time_limit, args.timeout_tolerance) for r in reports for o in r.outcomes) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="base URL of the service, e.g. http://127.0.0.1:8088")
    parser.add_argument("--endpoint", default="/judge")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--time-limit", type=float, default=10.0, help="the service's MAX_EXECUTION_TIME")
    parser.add_argument("--timeout-tolerance", type=float, default=0.5)
    parser.add_argument("--request-timeout", type=float, default=3600.0, help="client-side limit per request (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    args = parser.parse_args()
    unknown = set(args.phases.split(",")) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; choose from {PHASES}")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
