"""What scoring a splice costs (`rollback_is_threshold`, `rollback_is_measure`) next to the generation it follows.

On the `cpu` rollout backend (verl-cpu's `CpuGenerationServer`, in-process, the train-cpu model and settings),
for one recovered position of a trajectory at the lengths of `make train-cpu` (prompt + response up to
512 + 512 tokens, 128 new tokens per turn):

1. the failed turn: 128 tokens sampled after the purified context P (the prefix cache then holds P + failed turn);
2. the retry: 128 tokens sampled after P + failed turn + tool error (the prefix cache serves P + failed turn);
3. the scoring prefill with rollout log-probs on: P + retry with `prompt_logprobs=0`, `max_tokens=1`;
4. the second prefill with rollout log-probs off: P + failed turn + error + retry, scored the same way.

A request that asks for prompt log-probs is prefilled whole on this backend, as on vLLM (which skips its
prefix cache for such requests) and on verl's SGLang adapter (`logprob_start_len=0`). Every turn runs to its
token budget (`ignore_eos`) so the rows compare like for like; the table gives medians over `--repeats`.

Usage: .venv/bin/python benchmarks/scoring_cost.py [--repeats 5] [--dtype bfloat16] [--context 256 448 640]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
# make train-cpu: MAX_PROMPT_LENGTH / MAX_RESPONSE_LENGTH 512, MAX_NEW_TOKENS 128, bf16 rollout weights.
PROMPT_LENGTH, RESPONSE_LENGTH, TURN_TOKENS = 512, 512, 128
ERROR_TEXT = (
    'Traceback (most recent call last):\n  File "<cell>", line 4, in <module>\n    print(total(range(1, 201)))\n'
    '  File "<cell>", line 2, in total\n    return sum(x for x in values if x % 3 == 0 or x % 5 = 0)\n'
    "SyntaxError: invalid syntax. Maybe you meant '==' or ':=' instead of '='?"
)


@dataclass
class RolloutConfig:
    """The fields of verl's rollout config the CPU server reads."""

    dtype: str
    prompt_length: int = PROMPT_LENGTH
    response_length: int = RESPONSE_LENGTH
    seed: int = 0
    engine_kwargs: dict[str, Any] = field(default_factory=lambda: {"cpu": {"max_new_tokens": TURN_TOKENS}})


@dataclass
class ModelConfig:
    local_path: str
    tokenizer: Any


def filler(tokenizer, length: int) -> list[int]:
    """`length` tokens of the bundled problems' chat prompts (real text, so attention sees real tokens)."""
    rows = [json.loads(line) for line in (ROOT / "cleaner/resources/demo_problems.jsonl").read_text().splitlines()]
    ids: list[int] = []
    for row in rows * 20:
        ids += tokenizer.apply_chat_template(
            row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if len(ids) >= length:
            return ids[:length]
    raise ValueError(f"the bundled problems give fewer than {length} tokens")


async def timed(server, prompt_ids: list[int], params: dict[str, Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    output = await server.generate(prompt_ids=prompt_ids, sampling_params=params, request_id="bench")
    return time.perf_counter() - start, output


async def one_position(server, tokenizer, context: int, seed: int) -> dict[str, float]:
    sample = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True, "ignore_eos": True, "seed": seed}
    score = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 1, "prompt_logprobs": 0}
    server.prefix_cache.clear()  # each position starts cold, as a new trajectory's first turn would
    purified = filler(tokenizer, context)
    first_s, failed = await timed(server, purified, sample)
    error = tokenizer.encode(ERROR_TEXT)
    error_context = purified + list(failed.token_ids) + error
    retry_s, retry = await timed(server, error_context, sample)
    scored_s, scored = await timed(server, purified + list(retry.token_ids), score)
    behaviour_s, _ = await timed(server, error_context + list(retry.token_ids), score)
    if len(scored.extra_fields["prompt_logprobs"]) != context + len(retry.token_ids):
        raise RuntimeError("the scoring request came back without one prompt log-prob per token")
    return {
        "retry_tokens": len(retry.token_ids),
        "error_context": len(error_context),
        "first_s": first_s,
        "retry_s": retry_s,
        "score_s": scored_s,
        "behaviour_s": behaviour_s,
    }


async def measure(model_dir: Path, dtype: str, contexts: list[int], repeats: int) -> list[dict[str, float]]:
    from transformers import AutoTokenizer

    from verl_cpu.server import CpuGenerationServer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    server = CpuGenerationServer(RolloutConfig(dtype=dtype), ModelConfig(str(model_dir), tokenizer), 0, 8)
    await server.launch()
    await one_position(server, tokenizer, contexts[0], seed=1000)  # warm-up: allocator, kernels
    rows = []
    for context in contexts:
        runs = [await one_position(server, tokenizer, context, seed) for seed in range(repeats)]
        rows.append({"context": context, **{key: statistics.median(run[key] for run in runs) for key in runs[0]}})
    return rows


def table(rows: list[dict[str, float]]) -> str:
    lines = [
        "| purified context P | error context | retry generation (128 tok, cached prefix) | scoring prefill, log-probs on "
        "(P + retry) | × retry | second prefill, log-probs off (error context + retry) | both prefills × retry |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['context']} | {row['error_context']:.0f} | {row['retry_s']:.2f} s | {row['score_s']:.2f} s | "
            f"{row['score_s'] / row['retry_s']:.2f} | {row['behaviour_s']:.2f} s | "
            f"{(row['score_s'] + row['behaviour_s']) / row['retry_s']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="bfloat16", help="rollout weights (make train-cpu: bfloat16)")
    parser.add_argument(
        "--context",
        type=int,
        nargs="+",
        default=[256, 448, 640],
        help="purified context lengths (at 640 the error context and the retry fill the 1024 tokens of prompt + response)",
    )
    parser.add_argument("--model", type=Path, help="HF model directory (default: the train-cpu 0.5B conversion)")
    args = parser.parse_args()
    from cleaner.models.hf_from_gguf import ensure_hf_model

    model_dir = args.model or ensure_hf_model()
    rows = asyncio.run(measure(model_dir, args.dtype, args.context, args.repeats))
    print(
        f"model {model_dir.name}, {args.dtype}, {len(os.sched_getaffinity(0))} threads, load {os.getloadavg()[0]:.1f}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
