"""SAAR overhead on CPU, printed as markdown tables.

1. Splice + boundary time per rollback, for trajectories of 1k / 8k / 20k tokens whose failed turn is
   the last quarter of the trajectory (so the boundary search also scans a long turn). Goal: <= 1 ms at 20k.
2. Agent-loop CPU time per trajectory (process time, all threads) for verl's stock `ToolAgentLoop`,
   `CleanerToolAgentLoop` with rollback off, and with rollback on, replaying the same generations (one failing
   call that the next generation fixes, two more calls, an answer) from a replay server, with a tool that runs
   nothing and reports the outcome each call is written to have. Goal: off <= +2 % over stock.

Usage: .venv/bin/python benchmarks/saar_overhead.py [--trajectories 40] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from cleaner.models.qwen3_tokenizer import load_qwen3_tokenizer  # noqa: E402
from cleaner.saar.boundary import BoundaryFinder, CallMarkers, markers_for_format  # noqa: E402
from cleaner.saar.outcome import TOOL_OUTCOME_KEY, ErrorCategory, ToolOutcome  # noqa: E402
from cleaner.saar.splice import GeneratedTurn, StreamLengths, splice  # noqa: E402
from cleaner.verl.hand_built_loop import agent_loop_config, build_agent_loop  # noqa: E402

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


def tool_call_text(code: str) -> str:
    """A hermes `<tool_call>` block, as a Qwen model writes it."""
    return "<tool_call>\n" + json.dumps({"name": "code_interpreter", "arguments": {"code": code}}) + "\n</tool_call>"


FAILING_CODE = "values = [3, 5, 7]\nprint(sum(valus))"


def generations() -> list[str]:
    return [
        think(150, "plan") + tool_call_text(FAILING_CODE),
        think(150, "fix") + tool_call_text("values = [3, 5, 7]\nprint(sum(values))"),
        think(150, "next") + tool_call_text("import math\nprint(math.prod([3, 5, 7]))"),
        think(150, "check") + tool_call_text("print(15 + 105)"),
        think(100, "done") + "The answer is \\boxed{120}.",
    ]


class ReplayServer:
    """verl's server-manager contract (`generate` -> `TokenOutput`): one trajectory's generations, in order."""

    def __init__(self, turns: list[list[int]]):
        self._turns = iter(turns)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        ids = list(next(self._turns))
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed", num_preempted=0)


def replay_tool():
    """A verl `BaseTool` that runs nothing: `FAILING_CODE` fails with a NameError, every other call succeeds."""
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

    class ReplayTool(BaseTool):
        async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
            if parameters.get("code") == FAILING_CODE:
                outcome = ToolOutcome.model_error(ErrorCategory.EXCEPTION, exception_type="NameError")
                text = "Traceback (most recent call last):\nNameError: name 'valus' is not defined"
            else:
                outcome, text = ToolOutcome.ok(), "120"
            return ToolResponse(text=text), 0.0, {TOOL_OUTCOME_KEY: outcome.to_dict()}

    schema = {
        "type": "function",
        "function": {
            "name": "code_interpreter",
            "description": "Run Python code.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
        },
    }
    with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints its schema
        return ReplayTool({"type": "native"}, OpenAIFunctionToolSchema.model_validate(schema))


async def run_trajectories(tokenizer, loop_cls, enable: bool, count: int) -> float:
    """Process CPU seconds per trajectory for `count` sequential trajectories."""
    config = agent_loop_config(enable_tool_rollback=enable)
    tool = replay_tool()
    turns = [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id] for text in generations()]
    prompt = [{"role": "user", "content": "What is the sum and the product of 3, 5, 7?"}]
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    started = time.process_time()
    for i in range(count):
        loop = build_agent_loop(loop_cls, config, ReplayServer(turns), tokenizer, [tool])
        output = await loop.run(params, raw_prompt=prompt, tools_kwargs={}, extra_info={}, index=i)
    elapsed = time.process_time() - started
    recovered = output.extra_fields.get("saar_rollbacks_recovered", 0)
    if recovered != int(enable):  # the measurement is only meaningful if the loop did what it is timed for
        raise RuntimeError(
            f"{loop_cls.__name__} (rollback {'on' if enable else 'off'}) recovered {recovered} rollbacks"
        )
    return elapsed / count


async def loop_benchmark(tokenizer, trajectories: int, rounds: int) -> dict[str, list[float]]:
    """CPU seconds per trajectory of each variant, one sample per round."""
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
    names = list(variants)
    for round_index in range(rounds):  # interleaved, each round in a rotated order: drift hits every variant alike
        for name in names[round_index % len(names) :] + names[: round_index % len(names)]:
            loop_cls, enable = variants[name]
            samples[name].append(await run_trajectories(tokenizer, loop_cls, enable, trajectories))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=40, help="trajectories per measurement")
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved measurements per variant (the median is reported)"
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

    samples = asyncio.run(loop_benchmark(tokenizer, args.trajectories, args.rounds))
    stock = samples["stock verl ToolAgentLoop"]
    print(
        f"\nAgent-loop CPU time per trajectory (median over {args.rounds} rounds of {args.trajectories}; 5 generations,"
        " 4 tool calls); vs stock: the median of each round's ratio to stock, and their range\n"
    )
    print("| loop | CPU ms / trajectory | vs stock (median) | vs stock (rounds) |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        ratios = [100 * (value / base - 1) for value, base in zip(values, stock)]
        print(
            f"| {name} | {statistics.median(values) * 1000:.2f} | {statistics.median(ratios):+.1f} % "
            f"| {min(ratios):+.1f} to {max(ratios):+.1f} % |"
        )


if __name__ == "__main__":
    main()
