"""Every purification mode on the same real rollouts: how much positive advantage lands on failed tool calls,
and what each mode pays for it.

Rolls out the demo's model (Qwen2.5-Coder-1.5B on llama.cpp, `scripts/demo.py`'s services and settings) on the
bundled problems, n samples per problem, SAAR off and on with the same seeds, into a cache directory
(`rollout-saar-{off,on}.jsonl`, resumable: a second run only adds what is missing). Then it applies every mode
of `multi_turn.purification` to the same groups (the SAAR-on groups for `saar`, the SAAR-off groups for the
others) and prints one table (`cleaner.analysis.purification_table`, what `cleaner rollout` and `cleaner report`
print too), each figure with its sample size and a 95 % bootstrap interval over prompts:

    python benchmarks/purification.py                                  # roll out (n = 4) and print the table
    python benchmarks/purification.py --from purification-output      # only recompute the table from the cache
    python benchmarks/purification.py -- --problem-ids math-06,math-07 # arguments after -- go to scripts/demo.py
    python benchmarks/purification.py --time-budget 90                 # stop rolling out after 90 min

Problems run in order, all n samples of one before the next, so a time budget keeps a prefix of the problem
list: a subset fixed before any result. Prompts whose groups are incomplete in either mode are left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS_FILE = "runs.jsonl"  # one line per rollout invocation into the cache: command, wall time, load

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


def roll_out(out_dir: Path, samples: int, demo_args: list[str]) -> dict:
    """Both passes into `out_dir` (resuming what is there), as `make demo` runs them; returns the run's timing."""
    demo = load_demo()
    argv = ["--out-dir", str(out_dir), "-n", str(samples), "--resume", *demo_args]
    args = demo.parse_args(argv)
    layout = demo.Layout(args.out_dir)
    layout.prepare(resume=True)
    model = demo.resolve_model(args)
    problems, count = demo.select_problems(args, layout)
    load_before, started = os.getloadavg(), time.perf_counter()
    results = []
    try:
        with demo.sigterm_as_interrupt(), demo.running_services(args, model, layout) as services:
            argvs = {saar: demo.rollout_argv(args, problems, model, services, layout, saar) for saar in demo.MODES}
            results = demo.run_passes(argvs, services, layout, count * args.n_samples)
    finally:  # an interrupted run (Ctrl-C, SIGTERM at a time budget) keeps what it wrote, and says so
        run = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "demo_args": argv,
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


def read_cache(out_dir: Path) -> tuple[list[dict], list[dict]]:
    """The cached records of both passes and the runs that wrote them."""
    from cleaner.trajectory.store import read_records

    records = []
    for mode in ("off", "on"):
        path = out_dir / f"rollout-saar-{mode}.jsonl"
        if not path.is_file():
            raise SystemExit(f"{path} not found: roll out into {out_dir} first (without --from)")
        records += read_records(path)
    runs_path = out_dir / RUNS_FILE
    runs = [json.loads(line) for line in runs_path.read_text().splitlines() if line] if runs_path.is_file() else []
    return records, runs


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
    parser.add_argument("-n", "--n-samples", type=int, default=4, help="samples per problem and SAAR mode")
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
        if args.n_samples < 4:
            raise SystemExit("-n: the comparison needs at least 4 samples per prompt (RoC keeps half of a group)")
        out_dir = args.out_dir
        start_budget(args.time_budget)
        try:
            roll_out(out_dir, args.n_samples, args.demo_args)
        except BudgetReached as reached:
            logger.warning("%s: the table covers the prompts whose groups are complete", reached)
        signal.alarm(0)
    from cleaner.analysis.paired import pair_up, paired_differences
    from cleaner.analysis.paired_markdown import paired_markdown
    from cleaner.analysis.purification_table import purification_markdown, purification_table

    records, runs = read_cache(out_dir)
    table = purification_table(records, resamples=args.resamples, seed=args.bootstrap_seed)
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
