"""Where a CPU training step's time goes: seconds per phase, tokens/s and peak memory of verl's trainer on CPU.

Runs `recipe/cleaner/cpu_smoke.sh` (the same run as `make train-cpu`, minus the resume) for each model asked
for, samples the memory of every process of the run, and reads verl's own per-step metrics from its file
logger (`timing_s/*`, `perf/total_num_tokens`, `response_length/*`):

    python benchmarks/train_cpu.py --model tiny --model 0.5b      # run and print the table
    python benchmarks/train_cpu.py --metrics train-cpu-output/metrics.jsonl   # only read an existing run

Phases (verl's names): gen = rollout (agent loops, tool calls, reward inside the loop), reward = reward
post-processing, old_log_prob = actor forward over the batch, update_actor = forward + backward + step,
update_weights = weight sync into the CPU rollout server. Generation tokens/s counts the response tokens
(model and tool tokens) of the batch over `gen`; training tokens/s counts all tokens over `update_actor`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("gen", "reward", "old_log_prob", "update_actor", "update_weights", "step")


def model_dir(name: str, work: Path) -> Path:
    python = sys.executable
    if name == "tiny":
        command = [python, "-m", "cleaner.models", "tiny", "--out", str(work / "tiny-model")]
    elif name == "0.5b":
        command = [python, "-m", "cleaner.models", "convert"]
    else:
        raise SystemExit(f"unknown model {name!r} (tiny or 0.5b)")
    return Path(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def _tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of `root_pid` and all its descendants (Ray's processes are started below the driver)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_smoke(model: Path, out_dir: Path, steps: int) -> tuple[Path, float]:
    """Run the smoke recipe; return its metrics file and the peak resident memory of its process tree (bytes)."""
    env = {
        **os.environ,
        "MODEL_PATH": str(model),
        "OUTPUT_DIR": str(out_dir),
        "TOTAL_TRAINING_STEPS": str(steps),
        "TEST_FREQ": "-1",
    }
    with open(out_dir.parent / f"{out_dir.name}.log", "wb") as log:
        process = subprocess.Popen(
            [str(ROOT / "recipe/cleaner/cpu_smoke.sh"), "trainer.val_before_train=False"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        )
        peak = 0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _tree_rss_bytes(process.pid))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        stop.set()
        sampler.join()
    if code != 0:
        raise SystemExit(f"the smoke run failed ({code}); see {out_dir.parent / f'{out_dir.name}.log'}")
    return out_dir / "metrics.jsonl", peak


def step_rows(metrics_file: Path) -> list[dict]:
    rows = []
    for line in metrics_file.read_text().splitlines():
        record = json.loads(line)
        if "timing_s/step" in record["data"]:
            rows.append({"step": record["step"], **record["data"]})
    if not rows:
        raise SystemExit(f"{metrics_file}: no training step logged")
    return rows


def print_table(label: str, rows: list[dict], peak_bytes: float | None) -> None:
    header = ["model", "step"] + [f"{phase} s" for phase in PHASES] + ["gen tok/s", "train tok/s", "peak GiB"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        response_tokens = row["response_length/mean"] * row.get("perf/batch_size", row.get("global_seqlen/count", 1))
        total_tokens = row.get("perf/total_num_tokens", 0)
        cells = [label, str(row["step"])] + [f"{row.get(f'timing_s/{phase}', float('nan')):.1f}" for phase in PHASES]
        cells += [
            f"{response_tokens / row['timing_s/gen']:.1f}",
            f"{total_tokens / row['timing_s/update_actor']:.1f}",
            "n/a" if peak_bytes is None else f"{peak_bytes / 2**30:.1f}",
        ]
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", choices=["tiny", "0.5b"], help="run the smoke recipe with it")
    parser.add_argument("--metrics", type=Path, action="append", help="read an existing run's metrics.jsonl")
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.model and not args.metrics:
        parser.error("give --model and/or --metrics")
    for metrics_file in args.metrics or []:
        print_table(metrics_file.parent.name, step_rows(metrics_file), None)
    with tempfile.TemporaryDirectory(prefix="train-cpu-bench-") as tmp:
        work = Path(tmp)
        for name in args.model or []:
            metrics_file, peak = run_smoke(model_dir(name, work), work / f"run-{name}", args.steps)
            print_table(name, step_rows(metrics_file), peak)
    return 0


if __name__ == "__main__":
    sys.exit(main())
