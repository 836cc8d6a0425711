"""`cleaner rollout`: the CLEANER agent loop over a problem set against a running inference server."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from cleaner.names import AGENT_NAME
from cleaner.rewards.config import RewardConfig

from .client_config import BACKENDS, ServerClientConfig

SAAR_MODES = {"on": (True,), "off": (False,)}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "rollout",
        help="run the CLEANER agent loop over a parquet of problems against an inference server",
        description=__doc__,
    )
    parser.add_argument("--data", type=Path, required=True, help="problems: parquet (verl RLHF format) or JSONL")
    parser.add_argument("--output", type=Path, required=True, help="JSONL of trajectories (appended; resumes)")
    parser.add_argument("--backend", choices=BACKENDS, default="llamacpp")
    parser.add_argument("--server-url", required=True, help="base URL of the running inference server")
    parser.add_argument("--model-name", default="default", help="served model name (vLLM)")
    tokenizer = parser.add_mutually_exclusive_group(required=True)
    tokenizer.add_argument("--tokenizer", help="Hugging Face tokenizer dir or name of the served model")
    tokenizer.add_argument("--gguf", type=Path, help="the served Qwen2.5 GGUF: its tokenizer is derived from it")
    parser.add_argument(
        "--chat-template", type=Path, help="Jinja chat template replacing the tokenizer's (verl: custom_chat_template)"
    )
    parser.add_argument(
        "--tool-config",
        type=Path,
        help="verl tool yaml (default: the one cleaner ships, cleaner/resources/python_tool.yaml)",
    )
    parser.add_argument(
        "--judge-url",
        default=os.environ.get("JUDGE_URL", RewardConfig.judge_url),
        help="code-judge URL for the tool and the reward alike (default: $JUDGE_URL, else %(default)s)",
    )
    parser.add_argument(
        "--saar",
        choices=sorted(SAAR_MODES),
        default="on",
        help="SAAR rollback on or off (write each mode to its own --output)",
    )
    parser.add_argument(
        "--score-rollbacks",
        action="store_true",
        help="score each splice in its purified context (SAAR's rollback_is_measure) and record its log IS ratio "
        "in the rollback event; needs a server that returns prompt log-probs (vllm, sglang)",
    )
    parser.add_argument("-n", "--n-samples", type=int, default=1, help="trajectories per problem")
    parser.add_argument("--limit", type=int, help="only the first N problems")
    parser.add_argument("--concurrency", type=int, default=2, help="trajectories in flight")
    parser.add_argument("--trajectory-timeout", type=float, default=600.0, help="seconds per trajectory")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds per generate request")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--prompt-length", type=int, default=1024)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--max-new-tokens", type=int, default=512, help="cap per assistant turn")
    parser.add_argument("--max-assistant-turns", type=int, default=4)
    parser.add_argument("--tool-format", default="hermes", help="verl ToolParser name (multi_turn.format)")
    parser.add_argument(
        "--model-type", default="qwen2", help="Hugging Face model_type of the served model (picks verl's token builder)"
    )
    parser.add_argument("--agent-name", default=AGENT_NAME, help="for problems without agent_name")
    parser.add_argument("--override", action="append", default=[], help="extra hydra override of verl's config")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=run)


def load_tokenizer(args: argparse.Namespace):
    tokenizer = _base_tokenizer(args)
    if args.chat_template is not None:
        from .chat_template import use_chat_template

        use_chat_template(tokenizer, args.chat_template)
    return tokenizer


def _base_tokenizer(args: argparse.Namespace):
    if args.gguf is not None:
        from cleaner.models.model_assets import default_cache_dir
        from cleaner.models.qwen25_tokenizer import load_qwen25_tokenizer

        if not args.gguf.is_file():
            raise FileNotFoundError(f"GGUF model file not found: {args.gguf}")
        return load_qwen25_tokenizer(args.gguf, default_cache_dir())
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(args.tokenizer)


def check_scoring(args: argparse.Namespace) -> None:
    """`--score-rollbacks` needs SAAR on and a server that returns prompt-token log-probs."""
    if not args.score_rollbacks:
        return
    if args.saar != "on":
        raise SystemExit("--score-rollbacks scores SAAR's splices: it needs --saar on")
    from .clients import make_client

    probe = make_client(ServerClientConfig(backend=args.backend, url=args.server_url))
    if not probe.returns_prompt_logprobs:
        raise SystemExit(
            f"--score-rollbacks needs prompt-token log-probs, which the {args.backend} server does not return: "
            "use --backend vllm or sglang (make demo scores llama.cpp's splices afterwards, docs/demo.md)"
        )


def engine_override(backend: str) -> tuple[str, ...]:
    """verl's `rollout.name` for the servers verl itself runs (vllm, sglang); none for the others."""
    return (f"actor_rollout_ref.rollout.name={backend}",) if backend in ("vllm", "sglang") else ()


def settings_from_args(args: argparse.Namespace):
    from .driver import RolloutSettings

    tool_config = {} if args.tool_config is None else {"tool_config_path": args.tool_config}
    return RolloutSettings(
        **tool_config,
        output_path=args.output,
        n_samples=args.n_samples,
        saar_modes=SAAR_MODES[args.saar],
        agent_name=args.agent_name,
        judge_url=args.judge_url,
        tool_format=args.tool_format,
        hf_model_type=args.model_type,
        prompt_length=args.prompt_length,
        response_length=args.response_length,
        max_assistant_turns=args.max_assistant_turns,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        score_rollbacks=args.score_rollbacks,
        concurrency=args.concurrency,
        trajectory_timeout_s=args.trajectory_timeout,
        # The engine behind the server decides where a splice's sampled log-probs can stand for the behaviour side
        # (one scoring request instead of two: cleaner.saar.offpolicy); the user's overrides come after.
        overrides=(*engine_override(args.backend), *args.override),
        reward_kwargs={"judge_url": args.judge_url},
    )


def client_from_args(args: argparse.Namespace):
    from .clients import make_client

    return make_client(
        ServerClientConfig(
            backend=args.backend,
            url=args.server_url,
            max_new_tokens=args.max_new_tokens,
            max_model_len=args.prompt_length + args.response_length,
            request_timeout_s=args.request_timeout,
            model=args.model_name,
        )
    )


def print_summary(output: Path, problems: list, settings, result) -> None:
    """The summary table of this run's problems and modes (from the whole output file), then the run's counts."""
    from rich.console import Console
    from rich.markdown import Markdown

    from cleaner.analysis.offpolicy import event_log_is, gate_table, record_splices, span_table
    from cleaner.trajectory.store import read_records
    from cleaner.trajectory.summary import render_table, summarize

    console = Console()
    wanted = {problem.problem_id for problem in problems}
    records = [r for r in read_records(output) if r["problem_id"] in wanted and r["saar"] in settings.saar_modes]
    if records:
        console.print(render_table(summarize(records), title=f"rollout summary ({output})"))
    print_purification(console, records)
    scored = event_log_is(records)
    if scored:  # --score-rollbacks: the log IS ratio of each splice, by kind
        console.print(Markdown("Per rollback, log IS = Σ over its spliced tokens of log π(purified) − log π(sampled):"))
        console.print(Markdown(span_table(scored)))
        console.print(Markdown(gate_table(record_splices(records))))
    for saar, wall in sorted(result.wall_s_per_mode.items()):
        console.print(f"SAAR {'on' if saar else 'off'}: {wall:.1f} s wall for this run's trajectories")
    console.print(f"{result.written} written, {result.skipped} already done (resumed), {len(result.failed)} failed")


def print_purification(console, records: list[dict]) -> None:
    """Every purification mode on this run's groups (the table `cleaner report` and the benchmark show)."""
    from cleaner.analysis.purification_table import (
        PurificationTableError,
        has_turns,
        purification_table,
        render_purification_table,
    )

    if records and all(has_turns(record) for record in records):
        try:
            console.print(render_purification_table(purification_table(records)))
        except PurificationTableError as error:  # e.g. one sample per prompt: no GRPO group to audit
            console.print(f"purification modes not compared: {error}")


def run(args: argparse.Namespace) -> int:
    from cleaner.rewards import compute_score

    from .driver import RolloutRunner
    from .problems import load_problems

    check_scoring(args)
    problems = load_problems(args.data, args.limit)
    settings = settings_from_args(args)
    client = client_from_args(args)
    runner = RolloutRunner(settings, client, load_tokenizer(args), compute_score, show_progress=not args.no_progress)

    async def main():
        try:
            return await runner.run(problems)
        finally:
            await client.aclose()

    result = asyncio.run(main())
    print_summary(args.output, problems, settings, result)
    return 1 if result.failed else 0
