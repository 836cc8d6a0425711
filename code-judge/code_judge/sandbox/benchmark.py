"""Latency and CPU cost of one tiny program in each sandbox mode: `python -m code_judge.sandbox.benchmark`.

CPU is counted for the whole process tree (supervisor, bwrap, zygote, every forked program): each measurement
runs in a forked child whose rusage, collected by wait4, includes all the descendants it reaped. Start-up cost
is measured separately (a sandbox that runs nothing) and subtracted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

from tqdm import tqdm

from ..execution import Limits
from .config import SandboxConfig
from .launcher import bwrap_argv, sandbox_user
from .sandbox import Sandbox

FRESH = "fresh-python"
FRESH_BWRAP = "fresh-bwrap-python"
PROGRAMS = {
    "print": "print('hello world')",
    "numpy+sympy": "import numpy as np, sympy as sp\nprint(np.arange(10).sum(), sp.factorint(360))",
    "exception": "x = 1\nprint(y)",
    "sympy-solve": "import sympy as sp\nx = sp.symbols('x')\nprint(sp.solve(x**2 - 5*x + 6, x))",
}


def run_in_sandbox(config: SandboxConfig, source: str, runs: int, progress: bool) -> list[float]:
    latencies = []
    with Sandbox(config) as sandbox:
        for _ in tqdm(range(runs), desc=config.mode, leave=False, disable=None if progress else True):
            started = time.perf_counter()
            sandbox.run(source, "", Limits())
            latencies.append(time.perf_counter() - started)
    return latencies


def run_fresh_interpreter(mode: str, source: str, runs: int, progress: bool) -> list[float]:
    """The cost to beat: a new interpreter per program (bare, or in a new bwrap sandbox), importing what it uses."""
    config = SandboxConfig()
    prefix = bwrap_argv(config) if mode == FRESH_BWRAP else []
    user = sandbox_user(config) if mode == FRESH_BWRAP else None
    latencies = []
    for _ in tqdm(range(runs), desc=mode, leave=False, disable=None if progress else True):
        started = time.perf_counter()
        subprocess.run(
            [*prefix, config.python, "-I", "-c", source],
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
            capture_output=True,
            check=False,
        )
        latencies.append(time.perf_counter() - started)
    return latencies


def measure(mode: str, source: str, runs: int, progress: bool, one_zygote: bool) -> tuple[list[float], float]:
    """Run `source` `runs` times; return per-run latencies and the CPU seconds of the whole process tree."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        if mode in (FRESH, FRESH_BWRAP):
            latencies = run_fresh_interpreter(mode, source, runs, progress)
        else:
            heavy_modules = () if one_zygote else SandboxConfig.heavy_modules
            latencies = run_in_sandbox(SandboxConfig(mode=mode, heavy_modules=heavy_modules), source, runs, progress)
        with os.fdopen(write_end, "w") as out:
            json.dump(latencies, out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        latencies = json.load(pipe)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"benchmark child failed with status {status}")
    return latencies, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per program in the warm sandbox modes")
    parser.add_argument("--fresh-runs", type=int, default=20, help="runs per program with a fresh interpreter")
    parser.add_argument("--modes", nargs="+", default=["bwrap", "insecure", FRESH, FRESH_BWRAP])
    parser.add_argument(
        "--one-zygote", action="store_true", help="run every program in one zygote with all preloads (no light one)"
    )
    args = parser.parse_args()
    print("| mode | program | runs | p50 ms | p95 ms | CPU ms/run | start-up CPU ms |")
    print("|---|---|---|---|---|---|---|")
    for mode in args.modes:
        warm = mode in ("bwrap", "insecure")
        _, startup_cpu = measure(mode, "", 0, False, args.one_zygote) if warm else ([], 0.0)
        label = f"{mode}, one zygote" if warm and args.one_zygote else mode
        runs = args.fresh_runs if mode in (FRESH, FRESH_BWRAP) else args.runs
        for name, source in PROGRAMS.items():
            latencies, cpu = measure(mode, source, runs, True, args.one_zygote)
            latencies.sort()
            p95 = latencies[int(0.95 * (len(latencies) - 1))]
            per_run = (cpu - startup_cpu) / runs
            print(
                f"| {label} | {name} | {runs} | {statistics.median(latencies) * 1e3:.2f} | {p95 * 1e3:.2f} "
                f"| {per_run * 1e3:.2f} | {startup_cpu * 1e3:.0f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
