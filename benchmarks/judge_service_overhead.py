"""What the service itself costs, with the sandbox taken out: HTTP + Redis queue + workers around a no-op sandbox.

Starts an embedded redis-server, N workers whose "sandbox" returns `print(i)`'s verdict instantly, and the API on
a free loopback port; drives it with `judge_bench.py --phases tiny`; prints the requests/s and the CPU time per
request of each process kind. Compare with judge_bench.py against `code-judge serve` to see the sandbox's share.

    python benchmarks/judge_service_overhead.py [--workers N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from code_judge.app import create_app
from code_judge.execution import ExecutionResult, Limits
from code_judge.local import free_port
from code_judge.redis_server import EmbeddedRedis
from code_judge.settings import JudgeSettings
from code_judge.worker import WorkerGroup

BENCH = Path(__file__).with_name("judge_bench.py")


class NoOpSandbox:
    """Answers every program as if it printed the number in `print(<n>)` — no process is started."""

    mode = "noop"

    def run(self, source: str, stdin: str, limits: Limits, on_long: object = None) -> ExecutionResult:
        number = source.removeprefix("print(").removesuffix(")")
        return ExecutionResult(0, None, f"{number}\n", "", False, False, 0.0, None, None)

    def close(self) -> None:
        pass


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for_workers(url: str, count: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx.get(f"{url}/status", timeout=5).json()["num_workers"] < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} workers did not register within {timeout_s:g} s")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: MAX_WORKERS)")
    args = parser.parse_args()

    embedded = EmbeddedRedis()
    settings = JudgeSettings(redis_uri=embedded.start())
    workers = args.workers or settings.max_workers
    group = WorkerGroup(settings, workers, NoOpSandbox, NoOpSandbox.mode)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                       log_level="warning", access_log=False)
    )  # fmt: skip
    try:
        group.start()
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        wait_for_workers(f"http://127.0.0.1:{port}", workers)
        pids = {"api": [os.getpid()], "workers": group.pids, "redis": [embedded.pid]}
        before = {kind: sum(cpu_seconds(p) for p in ps) for kind, ps in pids.items()}
        started = time.perf_counter()
        bench = subprocess.run(
            [sys.executable, str(BENCH), "--url", f"http://127.0.0.1:{port}", "--phases", "tiny"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        client = os.times()
        after = {kind: sum(cpu_seconds(p) for p in ps) for kind, ps in pids.items()}
        print(bench.stdout)
        if bench.returncode != 0:
            print(bench.stderr[-2000:], file=sys.stderr)
            return bench.returncode
        requests = 500
        print(f"| process        | CPU ms / request |   (no-op sandbox, {workers} workers, {wall:.1f} s)")
        print("|----------------|------------------|")
        for kind in pids:
            print(f"| {kind:<14} | {(after[kind] - before[kind]) / requests * 1000:>16.3f} |")
        client_cpu = client.children_user + client.children_system
        print(f"| bench client   | {client_cpu / requests * 1000:>16.3f} |")
    finally:
        server.should_exit = True
        group.stop(grace_s=5)
        embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
