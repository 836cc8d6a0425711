"""Where a CPU training step's time goes: seconds per phase, tokens/s and peak memory of verl's trainer on CPU.

Runs `recipe/cleaner/train_cpu.sh` (the settings of `make train-cpu`, without validation, checkpoint and resume)
for each model asked for, samples the memory (PSS) of every process of the run and the load average, and reads
verl's own per-step metrics from its file logger (`timing_s/*`, `perf/total_num_tokens`, `response_length/*`):

    python benchmarks/train_cpu.py --model tiny --model 0.5b      # run and print the table
    python benchmarks/train_cpu.py --metrics train-cpu-output/metrics.jsonl   # only read an existing run
    python benchmarks/train_cpu.py --rollout 0.5b      # the CPU rollout's sampler alone, prefix cache off vs on
    python benchmarks/train_cpu.py --decode-step 0.5b [--dtype bfloat16]  # one decoding step, nn.Linear vs weight-major
    python benchmarks/train_cpu.py --update-step 0.5b  # an actor forward + backward, float32 vs bf16 autocast

Phases (verl's names): gen = rollout (agent loops, tool calls, reward inside the loop), reward = reward
post-processing, old_log_prob = actor forward over the batch, update_actor = forward + backward + step,
update_weights = weight sync into the CPU rollout server. Generation tokens/s counts the response tokens
(model and tool tokens) of the batch over `gen`; training tokens/s counts all tokens over `update_actor`.

`--rollout` times `verl_cpu.decoding.generate_batch` alone on a multi-turn conversation shaped like
a training step's (rows x turns, a tool response between turns; every turn runs to its token budget, so both
modes decode the same number of tokens), once without and once with the prefix cache; with the rollout server's
weight-major linear layers, or without them (`--plain-matmul`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("gen", "reward", "old_log_prob", "update_actor", "update_weights", "step")
# As `make train-cpu` runs each model (its TRAIN_CPU_ARGS): the 0.5B model with LoRA (docs/train-cpu.md), rollout
# log-probs on; `--precision` picks its TRAIN_CPU_PRECISION (bf16: rollout weights and actor compute in bf16;
# bf16-rollout: the rollout's weights only).
LORA = [
    "actor_rollout_ref.model.lora_rank=16",
    "actor_rollout_ref.actor.optim.lr=1e-5",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
]
MODEL_ARGS = {"tiny": [], "0.5b": LORA}


def _precision(rollout: str, actor: str) -> list[str]:
    return [
        f"actor_rollout_ref.rollout.dtype={rollout}",
        f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={actor}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
    ]


PRECISION_ARGS = {
    "bf16": _precision("bfloat16", "bfloat16"),
    "bf16-rollout": _precision("bfloat16", "float32"),
    "fp32": _precision("float32", "float32"),
}


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


def run_smoke(model: Path, out_dir: Path, steps: int, overrides: list[str]) -> tuple[Path, RunStats]:
    """Run the smoke recipe; return its metrics file, its peak memory (PSS of its process tree) and the load average."""
    env = {
        **os.environ,
        "MODEL_PATH": str(model),
        "OUTPUT_DIR": str(out_dir),
    }
    steps_args = [f"trainer.total_training_steps={steps}", "trainer.test_freq=-1", "trainer.save_freq=-1"]
    stats = RunStats()
    with open(out_dir.parent / f"{out_dir.name}.log", "wb") as log:
        process = subprocess.Popen(
            [str(ROOT / "recipe/cleaner/train_cpu.sh"), *overrides, *steps_args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
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


def trajectory_count(row: dict) -> int:
    """Trajectories in the step's batch: verl logs per-trajectory means and the batch's total token count."""
    return round(row["perf/total_num_tokens"] / (row["prompt_length/mean"] + row["response_length/mean"]))


def print_table(label: str, rows: list[dict], stats: RunStats | None) -> None:
    header = ["model", "step"] + [f"{phase} s" for phase in PHASES]
    # verl's per-token |p_actor - p_rollout| (training/rollout_probs_diff_*, present when rollout log-probs are on).
    header += ["tokens", "gen tok/s", "train tok/s", "rollout-actor |Δp| mean/max", "peak GiB (PSS)", "load avg"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        total_tokens = row.get("perf/total_num_tokens", 0)
        response_tokens = row["response_length/mean"] * trajectory_count(row)
        cells = [label, str(row["step"])] + [f"{row.get(f'timing_s/{phase}', float('nan')):.1f}" for phase in PHASES]
        cells += [
            str(total_tokens),
            f"{response_tokens / row['timing_s/gen']:.1f}",
            f"{total_tokens / row['timing_s/update_actor']:.1f}",
            (
                f"{row['training/rollout_probs_diff_mean']:.4f} / {row['training/rollout_probs_diff_max']:.3f}"
                if "training/rollout_probs_diff_mean" in row
                else "n/a"
            ),
            "n/a" if stats is None else f"{stats.peak_bytes / 2**30:.1f}",
            "n/a" if stats is None else f"{stats.mean_load:.1f}",
        ]
        print(" | ".join(cells))


def rollout_benchmark(
    model: Path,
    rows: int,
    groups: int,
    prompt_tokens: int,
    new_tokens: int,
    turns: int,
    tool_tokens: int,
    weight_major: bool,
) -> None:
    """Time the sampler on `rows` trajectories of `turns` turns, prefix cache off then on; print one row per turn.

    `weight_major` patches the model's linear layers as the rollout server does by default."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl_cpu.decoding import generate_batch
    from verl_cpu.prefix_cache import PrefixCache
    from verl_cpu.sampling import SamplingRequest
    from verl_cpu.server import PREFIX_CACHE_MB
    from verl_cpu.weight_major import use_weight_major_matmul

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    tokenizer = AutoTokenizer.from_pretrained(model)
    network = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    if weight_major:
        use_weight_major_matmul(network)
    text = "Write a Python function that reads a list of intervals and merges the overlapping ones. "

    def token_ids(prefix: str, count: int) -> list[int]:
        ids = tokenizer.encode(prefix + text * (count // 10 + 1))[:count]
        assert len(ids) == count
        return ids

    # GRPO: `groups` prompts, each sampled rows/groups times; the tool response is the same length every turn.
    prompts = [token_ids(f"Problem {row % groups}. ", prompt_tokens) for row in range(rows)]
    tool = token_ids("<tool_response>\n", tool_tokens)
    matmul = "weight-major" if weight_major else "plain"
    print(
        f"rollout sampler: {model.name}, float32, {matmul} matmul, {torch.get_num_threads()} threads, "
        f"{rows} rows ({groups} prompts)"
    )
    print(" | ".join(["prefix cache", "turn", "prompt tokens", "reused tokens", "wall s", "CPU s", "load avg"]))
    print(" | ".join("---" for _ in range(7)))
    totals = {}
    for cached in (False, True):
        cache = PrefixCache(PREFIX_CACHE_MB * 2**20) if cached else None
        conversation = [list(prompt) for prompt in prompts]
        totals[cached] = [0.0, 0.0]
        for turn in range(turns):
            requests = [
                SamplingRequest(ids, new_tokens, temperature=1.0, seed=1000 * row + turn)
                for row, ids in enumerate(conversation)
            ]
            reused_before = cache.stats["reused_tokens"] if cache else 0
            wall, cpu = time.perf_counter(), time.process_time()
            results = generate_batch(network, requests, tokenizer.pad_token_id or 0, torch.Generator(), cache)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            totals[cached][0] += wall
            totals[cached][1] += cpu
            reused = (cache.stats["reused_tokens"] if cache else 0) - reused_before
            cells = ["on" if cached else "off", str(turn + 1), str(sum(map(len, conversation))), str(reused)]
            print(" | ".join(cells + [f"{wall:.1f}", f"{cpu:.1f}", f"{os.getloadavg()[0]:.1f}"]))
            conversation = [ids + result.token_ids + tool for ids, result in zip(conversation, results, strict=True)]
    for cached, (wall, cpu) in totals.items():
        print(f"prefix cache {'on' if cached else 'off'}: {wall:.1f} s wall, {cpu:.1f} s CPU for {turns} turns")


def decode_step_benchmark(model: Path, context: int, steps: int, dtype: str) -> None:
    """Median milliseconds of one decoding step (1 and 8 rows, `context` cached tokens), plain vs weight-major."""
    import torch
    from transformers import AutoModelForCausalLM

    from verl_cpu.server import rollout_dtype
    from verl_cpu.weight_major import use_weight_major_matmul

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    network = AutoModelForCausalLM.from_pretrained(model, dtype=rollout_dtype(dtype)).eval()
    print(f"decoding step: {model.name}, {dtype}, {torch.get_num_threads()} threads, {context} cached tokens per row")
    print("matmul | rows | ms per step (median) | load avg")
    print("--- | --- | --- | ---")
    for matmul in ("plain", "weight-major"):
        if matmul == "weight-major":
            use_weight_major_matmul(network)
        for rows in (1, 8):
            generator = torch.Generator().manual_seed(rows)
            with torch.inference_mode():
                prompt = torch.randint(0, 10_000, (rows, context), generator=generator)
                cache = network(input_ids=prompt, use_cache=True, logits_to_keep=1).past_key_values
                attention = torch.ones((rows, context), dtype=torch.long)
                times = []
                for step in range(steps):
                    attention = torch.cat([attention, torch.ones((rows, 1), dtype=torch.long)], dim=-1)
                    started = time.perf_counter()
                    network(
                        input_ids=torch.full((rows, 1), 7),
                        attention_mask=attention,
                        position_ids=torch.full((rows, 1), context + step),
                        past_key_values=cache,
                        use_cache=True,
                    )
                    times.append(time.perf_counter() - started)
            print(f"{matmul} | {rows} | {statistics.median(times) * 1000:.0f} | {os.getloadavg()[0]:.1f}")


def update_step_benchmark(model: Path, tokens: int, repeats: int) -> None:
    """Seconds of one forward + backward over `tokens` tokens (one sequence, LoRA-free), float32 vs bf16 autocast.

    The actor's update and old-log-prob passes are this computation; verl's FSDP2 engine with
    `mixed_precision.param_dtype=bfloat16` casts the float32 master weights to bf16 for it, as autocast does here."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    network = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, attn_implementation="sdpa")
    network.train()
    ids = torch.randint(0, 10_000, (1, tokens), generator=torch.Generator().manual_seed(0))
    print(f"update step: {model.name}, fp32 master weights, {torch.get_num_threads()} threads, {tokens} tokens")
    print("compute | forward s | forward + backward s | load avg")
    print("--- | --- | --- | ---")
    for compute in ("float32", "bfloat16"):
        forward, both = [], []
        for _ in range(repeats):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute == "bfloat16"):
                started = time.perf_counter()
                with torch.no_grad():
                    network(input_ids=ids).logits.float().log_softmax(-1)
                forward.append(time.perf_counter() - started)
                started = time.perf_counter()
                loss = network(input_ids=ids).logits.float().log_softmax(-1)[0, :, 0].mean()
            loss.backward()
            both.append(time.perf_counter() - started)
            network.zero_grad(set_to_none=True)
        print(
            f"{compute} | {statistics.median(forward):.2f} | {statistics.median(both):.2f} | {os.getloadavg()[0]:.1f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", choices=["tiny", "0.5b"], help="run the smoke recipe with it")
    parser.add_argument("--metrics", type=Path, action="append", help="read an existing run's metrics.jsonl")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--precision", choices=sorted(PRECISION_ARGS), default="bf16", help="--model runs' dtypes")
    parser.add_argument("--rollout", choices=["tiny", "0.5b"], help="time the rollout sampler alone with it")
    parser.add_argument(
        "--decode-step", choices=["tiny", "0.5b"], help="time single decoding steps, plain vs weight-major matmul"
    )
    parser.add_argument(
        "--update-step", choices=["tiny", "0.5b"], help="time an actor forward + backward, float32 vs bf16 autocast"
    )
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="--decode-step's dtype")
    parser.add_argument("--tokens", type=int, default=1024, help="--update-step's sequence length")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--groups", type=int, default=2, help="distinct prompts among the rows")
    parser.add_argument("--prompt-tokens", type=int, default=450)
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens sampled per row and turn")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tool-tokens", type=int, default=60, help="tool response tokens between turns")
    parser.add_argument(
        "--plain-matmul", action="store_true", help="time the rollout without its weight-major linear layers"
    )
    args = parser.parse_args(argv)
    if not (args.model or args.metrics or args.rollout or args.decode_step or args.update_step):
        parser.error("give --model, --metrics, --rollout, --decode-step and/or --update-step")
    for metrics_file in args.metrics or []:
        print_table(metrics_file.parent.name, step_rows(metrics_file), None)
    with tempfile.TemporaryDirectory(prefix="train-cpu-bench-") as tmp:
        work = Path(tmp)
        for name in args.model or []:
            overrides = [*MODEL_ARGS[name], *PRECISION_ARGS[args.precision]]
            metrics_file, stats = run_smoke(model_dir(name, work), work / f"run-{name}", args.steps, overrides)
            print_table(name, step_rows(metrics_file), stats)
        if args.rollout:
            rollout_benchmark(
                model_dir(args.rollout, work),
                args.rows,
                args.groups,
                args.prompt_tokens,
                args.new_tokens,
                args.turns,
                args.tool_tokens,
                not args.plain_matmul,
            )
        if args.decode_step:
            decode_step_benchmark(model_dir(args.decode_step, work), context=400, steps=16, dtype=args.dtype)
        if args.update_step:
            update_step_benchmark(model_dir(args.update_step, work), args.tokens, repeats=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
