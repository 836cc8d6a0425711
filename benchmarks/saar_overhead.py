"""SAAR overhead on CPU, printed as markdown tables.

1. Splice + boundary time per rollback, for trajectories of 1k / 8k / 20k tokens whose failed turn is
   the last quarter of the trajectory (so the boundary search also scans a long turn). Goal: <= 1 ms at 20k.
2. Agent-loop CPU time per trajectory (process time, all threads) for verl's stock `ToolAgentLoop`,
   `CleanerToolAgentLoop` with rollback off, and with rollback on, replaying the same scripted generations
   (one failing call that the next generation fixes, two more calls, an answer). Goal: off <= +2 % over stock.

Usage: .venv/bin/python benchmarks/saar_overhead.py [--trajectories 40] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The scripted LLM server and tool are test support, not part of the package: import them as the tests do
# (`support.scripted_llm`, with tests/ on the path). `tests.support` would not work: verl's wheel installs a
# top-level `tests` package in site-packages, which shadows the repository's tests/ namespace directory.
REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

from cleaner.models.qwen3_tokenizer import load_qwen3_tokenizer  # noqa: E402
from cleaner.saar.boundary import BoundaryFinder, CallMarkers, markers_for_format  # noqa: E402
from cleaner.saar.splice import GeneratedTurn, StreamLengths, splice  # noqa: E402

MARKER = "BENCH-PROBLEM"
FENCE = CallMarkers(start="```python", end="```")


def reasoning(tokenizer, n_tokens: int, seed: int) -> list[int]:
    words = [f"step{seed}", "we", "compute", "the", "value", "of", "x", "then", "check", "it", "carefully", "again"]
    ids: list[int] = []
    i = 0
    while len(ids) < n_tokens:
        ids.extend(tokenizer.encode(f" {words[i % len(words)]}", add_special_tokens=False))
        i += 1
    return ids[:n_tokens]


def call_ids(tokenizer, code: str, fence: bool) -> list[int]:
    if fence:
        return tokenizer.encode(f"\n```python\n{code}\n```", add_special_tokens=False) + [tokenizer.eos_token_id]
    text = '<tool_call>\n{"name": "code_interpreter", "arguments": {"code": "' + code + '"}}\n</tool_call>'
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def splice_benchmark(tokenizer, total_tokens: int, fence: bool, repeats: int) -> float:
    """Median milliseconds for: find both boundaries + splice the stream."""
    think_open, think_close = (
        tokenizer.encode("<think>\n", add_special_tokens=False),
        tokenizer.encode("\n</think>\n\n", add_special_tokens=False),
    )
    turn_tokens = total_tokens // 4
    failed_ids = (
        think_open + reasoning(tokenizer, turn_tokens, 1) + think_close + call_ids(tokenizer, "print(y)", fence)
    )
    new_ids = (
        think_open + reasoning(tokenizer, turn_tokens // 2, 2) + think_close + call_ids(tokenizer, "print(x)", fence)
    )
    prefix = reasoning(tokenizer, total_tokens - len(failed_ids) - 200, 3)
    feedback = tokenizer.encode(
        "<tool_response>\nNameError: name 'y' is not defined\n</tool_response>", add_special_tokens=False
    )
    prompt_len = 200
    ids = prefix + failed_ids + feedback + new_ids
    response_len = len(ids) - prompt_len
    mask = [1] * response_len
    logprobs = [-0.5] * response_len
    base = StreamLengths(ids=len(prefix), mask=len(prefix) - prompt_len, logprobs=len(prefix) - prompt_len)
    finder = BoundaryFinder(tokenizer, FENCE if fence else markers_for_format("hermes"))
    finder.find(failed_ids)  # warm the decoded-piece cache, as a long-running worker would have it
    finder.find(new_ids)
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        old_b, new_b = finder.find(failed_ids), finder.find(new_ids)
        splice(
            ids,
            mask,
            logprobs,
            base,
            GeneratedTurn(failed_ids, [-0.5] * len(failed_ids), old_b),
            GeneratedTurn(new_ids, [-0.5] * len(new_ids), new_b),
            "shallow",
        )
        timings.append((time.perf_counter() - start) * 1000)
        assert old_b is not None and new_b is not None
    return statistics.median(timings)


def think(n_words: int, tag: str) -> str:
    return "<think>\n" + " ".join(f"{tag}{i % 17}" for i in range(n_words)) + "\n</think>\n\n"


def scripted_generations() -> list[str]:
    from support.scripted_llm import tool_call_text

    return [
        think(150, "plan") + tool_call_text("values = [3, 5, 7]\nprint(sum(valus))\n# outcome: exception NameError"),
        think(150, "fix") + tool_call_text("values = [3, 5, 7]\nprint(sum(values))"),
        think(150, "next") + tool_call_text("import math\nprint(math.prod([3, 5, 7]))"),
        think(150, "check") + tool_call_text("print(15 + 105)"),
        think(100, "done") + "The answer is \\boxed{120}.",
    ]


async def run_trajectories(tokenizer, loop_cls, enable: bool, count: int) -> float:
    """Process CPU seconds per trajectory for `count` sequential trajectories."""
    from support.scripted_llm import (
        ScriptedLLMServer,
        agent_loop_config,
        build_agent_loop,
        scripted_python_tool,
        training_sampling_params,
    )

    config = agent_loop_config(enable_tool_rollback=enable)
    tool = scripted_python_tool()
    generations = scripted_generations()
    prompt = [{"role": "user", "content": f"{MARKER}: what is the sum and the product of 3, 5, 7?"}]
    params = training_sampling_params(config)
    started = time.process_time()
    for i in range(count):
        server = ScriptedLLMServer(tokenizer, {MARKER: generations})
        loop = build_agent_loop(loop_cls, config, server, tokenizer, [tool])
        await loop.run(params, raw_prompt=prompt, tools_kwargs={}, extra_info={}, index=i)
    return (time.process_time() - started) / count


async def loop_benchmark(tokenizer, trajectories: int, rounds: int) -> dict[str, float]:
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from cleaner.verl.agent_loop import CleanerToolAgentLoop

    variants = {
        "stock verl ToolAgentLoop": (ToolAgentLoop, False),
        "cleaner, rollback off": (CleanerToolAgentLoop, False),
        "cleaner, rollback on": (CleanerToolAgentLoop, True),
    }
    for loop_cls, enable in variants.values():  # warm-up: imports, template compilation, caches
        await run_trajectories(tokenizer, loop_cls, enable, 3)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):  # interleaved, so drift in machine load hits every variant alike
        for name, (loop_cls, enable) in variants.items():
            samples[name].append(await run_trajectories(tokenizer, loop_cls, enable, trajectories))
    return {name: min(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=40, help="trajectories per measurement")
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved measurements per variant (the minimum is reported)"
    )
    parser.add_argument("--splice-repeats", type=int, default=200)
    args = parser.parse_args()
    import logging

    logging.disable(logging.WARNING)
    tokenizer = load_qwen3_tokenizer()

    print("Splice + boundary per rollback (median ms; failed turn = last quarter of the trajectory)\n")
    print("| trajectory tokens | hermes `<tool_call>` (single token) | ```` ```python ```` fence (multi-token) |")
    print("|---:|---:|---:|")
    for total in (1_000, 8_000, 20_000):
        hermes = splice_benchmark(tokenizer, total, fence=False, repeats=args.splice_repeats)
        fence = splice_benchmark(tokenizer, total, fence=True, repeats=args.splice_repeats)
        print(f"| {total:,} | {hermes:.3f} | {fence:.3f} |")

    results = asyncio.run(loop_benchmark(tokenizer, args.trajectories, args.rounds))
    stock = results["stock verl ToolAgentLoop"]
    print(
        f"\nAgent-loop CPU time per trajectory (min over {args.rounds} rounds of {args.trajectories}; 5 generations, 4 tool calls)\n"
    )
    print("| loop | CPU ms / trajectory | vs stock |")
    print("|---|---:|---:|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds * 1000:.2f} | {100 * (seconds / stock - 1):+.1f} % |")


if __name__ == "__main__":
    main()
