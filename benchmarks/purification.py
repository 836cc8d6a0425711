"""Every purification mode on the same real rollouts: what each mode does with the failed tool calls the policy
sampled, and what it pays for it.

Rolls out a demo model (`scripts/demo.py`'s services and settings: llama.cpp, one single-slot server per SAAR mode;
by default the 0.5B with 256 new tokens per turn, 4 turns, 1024 response tokens) on the benchmark's problem set (`benchmarks/data/purification_problems.jsonl`: the 19 bundled demo problems and
30 generated ones with checked answers, `cleaner.data.checked_math`), SAAR on with `-n` samples per problem and
SAAR off with `--off-samples` (the first `-n` of them share their seeds with SAAR on; the rest let RoC sample more
rollouts per prompt, as many as match SAAR's generated tokens), into a cache directory (`rollout-saar-{off,on}.jsonl`,
one record per trajectory, resumable: a second run only adds what is missing). Then it applies every mode of
`multi_turn.purification` and the negative-sample setting to the same groups and prints the tables (`cleaner.analysis.purification_table`, what
`cleaner rollout` and `cleaner report` print too), each figure with its sample size and a 95 % bootstrap interval
over prompts:

    python benchmarks/purification.py                                   # roll out and print the table
    python benchmarks/purification.py --from benchmarks/data/purification-rollouts   # recompute from the records
    python benchmarks/purification.py -- --limit 20                     # arguments after -- go to scripts/demo.py
    python benchmarks/purification.py --time-budget 90                  # stop rolling out after 90 min

Problems run in order, all samples of one before the next, so a time budget keeps a prefix of the problem
list: a subset fixed before any result. Prompts whose groups are incomplete in either mode are left out.
A cache directory may hold the records gzipped (`rollout-saar-{off,on}.jsonl.gz`, as committed).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import logging
import os
import shutil
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_FILE = "runs.jsonl"  # one line per rollout invocation into the cache: command, wall time, load
PROBLEMS_FILE = "problems.jsonl"  # the problems rolled out, with their families
PROBLEM_SET = ROOT / "benchmarks" / "data" / "purification_problems.jsonl"

logger = logging.getLogger("purification")


class BudgetReached(Exception):
    """--time-budget ran out: the passes are stopped, the groups already complete are kept."""


def start_budget(minutes: float | None) -> None:
    if minutes is None:
        return

    def stop(signum, _frame):
        raise BudgetReached(f"--time-budget of {minutes:g} min reached")

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(max(1, round(minutes * 60)))


def load_demo():
    """`scripts/demo.py` as a module: its services, pass runner and settings are the ones this benchmark uses."""
    spec = importlib.util.spec_from_file_location("cleaner_demo", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def roll_out(out_dir: Path, samples: int, off_samples: int, demo_args: list[str]) -> dict:
    """Both passes into `out_dir` (resuming what is there), as `make demo` runs them (SAAR off with `off_samples`
    samples per problem); returns the run's timing."""
    demo = load_demo()
    argv = ["--out-dir", str(out_dir), "-n", str(samples), "--resume", *demo_args]
    args = demo.parse_args(argv)
    layout = demo.Layout(args.out_dir)
    layout.prepare(resume=True)
    model = demo.resolve_model(args)
    problems, count = demo.select_problems(args, layout)
    if problems != layout.problems:  # --from reads the problems' families from the cache directory
        shutil.copyfile(problems, layout.problems)
    samples_of = {True: samples, False: off_samples}
    load_before, started = os.getloadavg(), time.perf_counter()
    results = []
    try:
        with demo.sigterm_as_interrupt(), demo.running_services(args, model, layout) as services:
            argvs = {
                saar: demo.rollout_argv(
                    argparse.Namespace(**{**vars(args), "n_samples": samples_of[saar]}),
                    layout.problems,
                    model,
                    services,
                    layout,
                    saar,
                )
                for saar in demo.MODES
            }
            results = demo.run_passes(argvs, services, layout, count * max(samples, off_samples))
    finally:  # an interrupted run (Ctrl-C, SIGTERM at a time budget) keeps what it wrote, and says so
        run = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "demo_args": [in_checkout(arg) for arg in argv],
            "off_samples": off_samples,
            "wall_s": time.perf_counter() - started,
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "interrupted": not results,
            "passes": [
                {"saar": r.saar, "exit_code": r.exit_code, "wall_s": r.wall_s, "model_cpu_s": r.model_cpu_s}
                for r in results
            ],
        }
        with open(out_dir / RUNS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(run) + "\n")
    for result in results:
        if result.exit_code != 0:
            logger.error("SAAR-%s pass exited with %d: see %s", demo.mode_name(result.saar), result.exit_code,
                         layout.rollout_log(result.saar))  # fmt: skip
    return run


def in_checkout(arg: str) -> str:
    """A path inside this checkout as a path relative to it (a record of the run readable from any clone)."""
    return arg[len(str(ROOT)) + 1 :] if arg.startswith(f"{ROOT}/") else arg


def read_records_file(path: Path) -> list[dict]:
    """A rollout file's records, plain or gzipped."""
    from cleaner.trajectory.store import read_records

    if path.suffix != ".gz":
        return read_records(path)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_cache(out_dir: Path) -> tuple[list[dict], list[dict], dict[str, str]]:
    """The cached records of both passes, the runs that wrote them and each problem's family."""
    from cleaner.data.rows import read_rows

    records = []
    for mode in ("off", "on"):
        candidates = [out_dir / f"rollout-saar-{mode}.jsonl{suffix}" for suffix in ("", ".gz")]
        found = [path for path in candidates if path.is_file()]
        if len(found) != 1:
            raise SystemExit(f"{out_dir}: expected one of {[p.name for p in candidates]}, found {len(found)}")
        records += read_records_file(found[0])
    runs_path = out_dir / RUNS_FILE
    runs = [json.loads(line) for line in runs_path.read_text().splitlines() if line] if runs_path.is_file() else []
    problems_path = out_dir / PROBLEMS_FILE
    if not problems_path.is_file():
        raise SystemExit(f"{problems_path} not found: the table reads each problem's family from it")
    families = {
        str(row["extra_info"]["problem_id"]): str(row["extra_info"].get("family", "unlabelled"))
        for row in read_rows(problems_path)
    }
    return records, runs, families


def describe_runs(runs: list[dict]) -> str:
    lines = []
    for run in runs:
        passes = ", ".join(
            f"SAAR {'on' if p['saar'] else 'off'} {p['wall_s']:.0f} s wall / {p['model_cpu_s']:.0f} s llama.cpp CPU"
            f" (exit {p['exit_code']})"
            for p in run["passes"]
        )
        if run.get("interrupted"):
            passes = "interrupted"
        lines.append(
            f"- {run['date']}: `scripts/demo.py {' '.join(run['demo_args'])}`: {run['wall_s']:.0f} s ({passes}); "
            "load average before {:.1f}/{:.1f}/{:.1f}, after {:.1f}/{:.1f}/{:.1f}".format(
                *run["load_before"], *run["load_after"]
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, help="a cache directory of an earlier run: only compute")
    parser.add_argument("--out-dir", type=Path, default=Path("purification-output"), help="the rollout cache")
    parser.add_argument("--model", default="0.5b", help="bundled model size (scripts/demo.py --model)")
    # Shorter than `make demo`'s 384 / 5 / 1536: the 0.5B's failing trajectories then fit the benchmark's budget.
    parser.add_argument("--max-new-tokens", type=int, default=256, help="per assistant turn")
    parser.add_argument("--max-assistant-turns", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--problems", type=Path, default=PROBLEM_SET, help="parquet or JSONL with extra_info.family")
    parser.add_argument(
        "-n",
        "--n-samples",
        type=int,
        default=5,
        help="samples per problem with SAAR on (5: SAAR's extra tokens then put RoC's 6 within 10 %% of its budget)",
    )
    parser.add_argument(
        "--off-samples",
        type=int,
        default=6,
        help="samples per problem with SAAR off (at least -n): the extra ones give RoC its token-matched oversampling",
    )
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap draws over prompts")
    parser.add_argument("--bootstrap-seed", type=int, default=0)
    parser.add_argument(
        "--time-budget",
        type=float,
        help="minutes: then stop rolling out and compute the table over the prompts whose groups are complete "
        "(problems run in the given order, so the subset is fixed before any result)",
    )
    parser.add_argument("demo_args", nargs="*", help="arguments for scripts/demo.py (after --)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    out_dir = args.source
    if out_dir is None:
        if args.n_samples < 2:
            raise SystemExit("-n: GRPO needs groups of at least 2 samples per prompt")
        if args.off_samples < args.n_samples:
            raise SystemExit(f"--off-samples {args.off_samples}: at least -n ({args.n_samples})")
        out_dir = args.out_dir
        demo_args = [] if "--gguf" in args.demo_args else ["--model", args.model]
        demo_args += ["--problems", str(args.problems), "--max-new-tokens", str(args.max_new_tokens)]
        demo_args += ["--max-assistant-turns", str(args.max_assistant_turns)]
        demo_args += ["--response-length", str(args.response_length), *args.demo_args]
        start_budget(args.time_budget)
        try:
            roll_out(out_dir, args.n_samples, args.off_samples, demo_args)
        except BudgetReached as reached:
            logger.warning("%s: the table covers the prompts whose groups are complete", reached)
        signal.alarm(0)
    from cleaner.analysis.paired import pair_up, paired_differences
    from cleaner.analysis.paired_markdown import paired_markdown
    from cleaner.analysis.purification_table import purification_markdown, purification_table

    records, runs, families = read_cache(out_dir)
    table = purification_table(records, resamples=args.resamples, seed=args.bootstrap_seed, families=families)
    print(f"\n{out_dir}: {len(records)} trajectories\n")
    print(purification_markdown(table))
    pairs = pair_up(records)
    if pairs:
        print("\nSAAR on vs off, paired (as `make demo` prints it):\n")
        print(paired_markdown(pairs, paired_differences(pairs)))
    if runs:
        print("\nRollouts:\n" + describe_runs(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
