"""Drive any service with the code-judge HTTP API with a fixed workload and print a table per phase.

Workload (820 programs): 500 tiny prints, 200 CPU loops of ~30 ms, 50 infinite loops, 50 uncaught exceptions,
20 programs allocating 4 GiB. Each kind runs alone (phased), then all 820 run again in shuffled order. Every
program goes to `/judge` (one request each) at a fixed client concurrency. A verdict is correct when it is the
real one: prints and loops succeed with the expected output, infinite loops end in `worker_timeout` with a cost
within `--timeout-tolerance` of `--time-limit`, exceptions and 4 GiB allocations fail with reason "".

For the shuffled phase it also prints a table per kind, with the tiny programs that ran while at least one
infinite loop was in flight as a row of their own. With `--service-pid` (the pid of `code-judge serve`, or of
any process whose descendants are the whole service) it adds the service's CPU time per request of each phase,
read from /proc for that process and all its descendants, in total and per kind of process (the API process,
the workers, redis-server, the sandboxes with their zygotes and programs). The load average is printed before
and after.

    python benchmarks/judge_bench.py --url http://127.0.0.1:8088 [--concurrency 32] [--time-limit 10] \
        [--service-pid PID]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

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
    started_s: float  # time.perf_counter() when the request was sent
    latency_s: float
    verdict: dict | None
    error: str | None = None

    @property
    def ended_s(self) -> float:
        return self.started_s + self.latency_s


@dataclass
class PhaseReport:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0
    service_cpu_s: float | None = None  # CPU time of the service's processes during the phase
    cpu_by_kind: dict[str, float] = field(default_factory=dict)  # the same, per kind of process (PROCESS_KINDS)


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
                error = f"HTTP {response.status}: {text[:200]}"
                return Outcome(program, started, time.perf_counter() - started, None, error)
            verdict = await response.json()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return Outcome(program, started, time.perf_counter() - started, None, f"{type(exc).__name__}: {exc}")
    return Outcome(program, started, time.perf_counter() - started, verdict)


PROCESS_KINDS = ("api", "workers", "redis", "sandboxes")


def process_kind(pid: int, parent_kind: str | None) -> str:
    """api: the process given as --service-pid; redis: redis-server; workers: multiprocessing's processes;
    sandboxes: bwrap and everything below it (zygotes, programs); anything else counts as its parent's kind."""
    if parent_kind is None:
        return "api"
    if parent_kind == "sandboxes":
        return parent_kind
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if argv[0].endswith(b"bwrap"):
        return "sandboxes"
    if b"redis-server" in argv[0]:  # it rewrites its argv[0] into a title with its address
        return "redis"
    return "workers" if b"multiprocessing" in b" ".join(argv) else parent_kind


def cpu_seconds_by_kind(pid: int) -> dict[str, float]:
    """CPU time of `pid` and every live descendant, each with the CPU of the children it has reaped, per kind."""
    totals = dict.fromkeys(PROCESS_KINDS, 0.0)
    frontier: list[tuple[int, str | None]] = [(pid, None)]
    while frontier:
        current, parent_kind = frontier.pop()
        try:
            kind = process_kind(current, parent_kind)
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            totals[kind] += sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                frontier += [(int(child), kind) for child in children]
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile; its CPU is counted by whoever reaps it
    return totals


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def run_phase(
    name: str, programs: list[Program], url: str, concurrency: int, timeout_s: float, service_pid: int | None
) -> PhaseReport:
    report = PhaseReport(name)
    cpu_before = None if service_pid is None else cpu_seconds_by_kind(service_pid)
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
    if cpu_before is not None:
        cpu_after = cpu_seconds_by_kind(service_pid)
        report.cpu_by_kind = {kind: cpu_after[kind] - cpu_before[kind] for kind in PROCESS_KINDS}
        report.service_cpu_s = sum(report.cpu_by_kind.values())
    return report


def percentile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def latency_row(label: str, outcomes: list[Outcome], time_limit: float, tolerance: float) -> str:
    latencies = [o.latency_s * 1000 for o in outcomes]
    correct = sum(is_correct(o, time_limit, tolerance) for o in outcomes)
    n = len(outcomes)
    reasons = Counter(o.verdict["reason"] for o in outcomes if o.verdict is not None and o.verdict["reason"])
    shown = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items())) or "-"
    return (
        f"| {label:<22} | {n:>4} | {percentile(latencies, 50):>8.1f} | {percentile(latencies, 99):>8.1f} | "
        f"{max(latencies):>8.1f} | {correct:>4}/{n:<4} | {shown} |"
    )


def print_table(reports: list[PhaseReport], time_limit: float, tolerance: float) -> None:
    header = (
        f"| {'phase':<10} | {'n':>4} | {'req/s':>7} | {'p50 ms':>8} | {'p95 ms':>8} | {'p99 ms':>8} | {'correct':>9} "
        f"| {'svc CPU ms/req':>14} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for report in reports:
        latencies = [o.latency_s * 1000 for o in report.outcomes]
        correct = sum(is_correct(o, time_limit, tolerance) for o in report.outcomes)
        n = len(report.outcomes)
        cpu = "-" if report.service_cpu_s is None else f"{report.service_cpu_s / n * 1000:.2f}"
        print(
            f"| {report.name:<10} | {n:>4} | {n / report.wall_s:>7.1f} | {percentile(latencies, 50):>8.1f} | "
            f"{percentile(latencies, 95):>8.1f} | {percentile(latencies, 99):>8.1f} | {correct:>4}/{n:<4} | {cpu:>14} |"
        )


def print_cpu_table(reports: list[PhaseReport]) -> None:
    """The service's CPU per request of each phase, split by kind of process."""
    print(f"\nservice CPU ms per request, by process:\n\n| {'phase':<10} | " + " | ".join(f"{k:>9}" for k in PROCESS_KINDS)
          + " |    total |")  # fmt: skip
    print("|" + "|".join("-" * 11 for _ in range(len(PROCESS_KINDS) + 2)) + "|")
    for report in reports:
        n = len(report.outcomes)
        cells = " | ".join(f"{report.cpu_by_kind[kind] / n * 1000:>9.2f}" for kind in PROCESS_KINDS)
        print(f"| {report.name:<10} | {cells} | {report.service_cpu_s / n * 1000:>8.2f} |")


def print_mixed_table(report: PhaseReport, time_limit: float, tolerance: float) -> None:
    """Per kind within the shuffled phase; tiny programs that overlapped an infinite loop get a row of their own."""
    loops = [(o.started_s, o.ended_s) for o in report.outcomes if o.program.kind == "infinite"]
    tiny = [o for o in report.outcomes if o.program.kind == "tiny"]
    beside_loops = [o for o in tiny if any(start < o.ended_s and o.started_s < end for start, end in loops)]
    print(f"\nshuffled, per kind (all {len(report.outcomes)} done in {report.wall_s:.1f} s):\n")
    print(f"| {'kind':<22} | {'n':>4} | {'p50 ms':>8} | {'p99 ms':>8} | {'max ms':>8} | {'correct':>9} | reasons |")
    print(f"|{'-' * 24}|{'-' * 6}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 11}|---------|")
    for kind in ("tiny", "cpu", "infinite", "exception", "alloc_4g"):
        outcomes = [o for o in report.outcomes if o.program.kind == kind]
        if outcomes:
            print(latency_row(kind, outcomes, time_limit, tolerance))
        if kind == "tiny" and beside_loops:
            print(latency_row("tiny while loops ran", beside_loops, time_limit, tolerance))
    shares = sorted(
        o.verdict["cpu_cost"] / o.verdict["cost"]
        for o in report.outcomes
        if o.program.kind == "infinite" and o.verdict and o.verdict.get("cpu_cost") is not None
    )
    if shares:
        print(
            f"\ninfinite loops' CPU share (cpu_cost / cost): min {shares[0]:.3f}, median "
            f"{statistics.median(shares):.3f}, max {shares[-1]:.3f}"
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


async def wait_until_ready(base_url: str, timeout_s: float) -> None:
    """Wait until the service answers /status with at least one live worker (it may still be starting)."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while True:
            try:
                async with session.get(base_url + "/status") as response:
                    if response.status == 200 and (await response.json()).get("num_workers", 0) > 0:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise SystemExit(f"{base_url} has no live worker after {timeout_s:g} s")
            await asyncio.sleep(0.2)


async def main_async(args: argparse.Namespace) -> int:
    url = args.url.rstrip("/") + args.endpoint
    programs = workload()
    reports = []
    await wait_until_ready(args.url.rstrip("/"), args.wait_ready)
    print(f"load average before: {load_average()}")
    for kind in args.phases.split(","):
        if kind == "shuffled":
            phase = programs[:]
            random.Random(args.seed).shuffle(phase)
        else:
            phase = [p for p in programs if p.kind == kind]
        reports.append(await run_phase(kind, phase, url, args.concurrency, args.request_timeout, args.service_pid))
    print(f"load average after:  {load_average()}\n")
    print_table(reports, args.time_limit, args.timeout_tolerance)
    if args.service_pid is not None:
        print_cpu_table(reports)
    for report in reports:
        if report.name == "shuffled":
            print_mixed_table(report, args.time_limit, args.timeout_tolerance)
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
    parser.add_argument(
        "--wait-ready", type=float, default=120.0, help="seconds to wait for /status to show a live worker"
    )
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument(
        "--service-pid", type=int, default=None, help="measure the CPU time of this process and its descendants"
    )
    args = parser.parse_args()
    unknown = set(args.phases.split(",")) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; choose from {PHASES}")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
