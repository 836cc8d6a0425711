"""Where a CPU training step's time goes: seconds per phase, tokens/s and peak memory of verl's trainer on CPU.

Runs `recipe/cleaner/cpu_smoke.sh` (the settings of `make train-cpu`, without validation, checkpoint and resume)
for each model asked for, samples the memory (PSS) of every process of the run and the load average, and reads
verl's own per-step metrics from its file logger (`timing_s/*`, `perf/total_num_tokens`, `response_length/*`):

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
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("gen", "reward", "old_log_prob", "update_actor", "update_weights", "step")
# As `make train-cpu` runs each model (its TRAIN_CPU_ENV): the 0.5B model with LoRA (docs/train-cpu.md).
MODEL_ENV = {"tiny": {}, "0.5b": {"LORA_RANK": "16", "ACTOR_LR": "1e-5"}}


def model_dir(name: str, work: Path) -> Path:
    python = sys.executable
    if name == "tiny":
        command = [python, "-m", "cleaner.models", "tiny", "--out", str(work / "tiny-model")]
    elif name == "0.5b":
        command = [python, "-m", "cleaner.models", "convert"]
    else:
        raise SystemExit(f"unknown model {name!r} (tiny or 0.5b)")
    return Path(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def _tree_pss_bytes(root_pid: int) -> int:
    """Proportional memory (PSS) of `root_pid` and all its descendants (Ray's processes start below the driver).

    PSS splits shared pages between the processes that map them, so Ray's shared-memory object store and the
    libraries every worker loads are counted once, not once per process as RSS would."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


@dataclass
class RunStats:
    peak_bytes: int = 0
    load_samples: list[float] = field(default_factory=list)

    @property
    def mean_load(self) -> float:
        return sum(self.load_samples) / len(self.load_samples) if self.load_samples else float("nan")


def run_smoke(model: Path, out_dir: Path, steps: int, extra_env: dict[str, str]) -> tuple[Path, RunStats]:
    """Run the smoke recipe; return its metrics file, its peak memory (PSS of its process tree) and the load average."""
    env = {
        **os.environ,
        **extra_env,
        "MODEL_PATH": str(model),
        "OUTPUT_DIR": str(out_dir),
        "TOTAL_TRAINING_STEPS": str(steps),
        "TEST_FREQ": "-1",
        "SAVE_FREQ": "-1",
    }
    stats = RunStats()
    with open(out_dir.parent / f"{out_dir.name}.log", "wb") as log:
        process = subprocess.Popen(
            [str(ROOT / "recipe/cleaner/cpu_smoke.sh")], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                stats.peak_bytes = max(stats.peak_bytes, _tree_pss_bytes(process.pid))
                stats.load_samples.append(os.getloadavg()[0])
                time.sleep(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        stop.set()
        sampler.join()
    if code != 0:
        raise SystemExit(f"the smoke run failed ({code}); see {out_dir.parent / f'{out_dir.name}.log'}")
    return out_dir / "metrics.jsonl", stats


def step_rows(metrics_file: Path) -> list[dict]:
    rows = []
    for line in metrics_file.read_text().splitlines():
        record = json.loads(line)
        if "timing_s/step" in record["data"]:
            rows.append({"step": record["step"], **record["data"]})
    if not rows:
        raise SystemExit(f"{metrics_file}: no training step logged")
    return rows


def print_table(label: str, rows: list[dict], stats: RunStats | None) -> None:
    header = ["model", "step"] + [f"{phase} s" for phase in PHASES]
    header += ["tokens", "gen tok/s", "train tok/s", "peak GiB (PSS)", "load avg"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        response_tokens = row["response_length/mean"] * row.get("perf/batch_size", row.get("global_seqlen/count", 1))
        total_tokens = row.get("perf/total_num_tokens", 0)
        cells = [label, str(row["step"])] + [f"{row.get(f'timing_s/{phase}', float('nan')):.1f}" for phase in PHASES]
        cells += [
            str(total_tokens),
            f"{response_tokens / row['timing_s/gen']:.1f}",
            f"{total_tokens / row['timing_s/update_actor']:.1f}",
            "n/a" if stats is None else f"{stats.peak_bytes / 2**30:.1f}",
            "n/a" if stats is None else f"{stats.mean_load:.1f}",
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
            metrics_file, stats = run_smoke(model_dir(name, work), work / f"run-{name}", args.steps, MODEL_ENV[name])
            print_table(name, step_rows(metrics_file), stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
