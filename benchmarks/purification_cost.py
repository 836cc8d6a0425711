"""What purification costs the trainer's driver per step, at the 4B recipe's batch shape.

A synthetic legacy-trainer batch (verl DataProto) shaped like `qwen3_4b_cleaner`'s step where verl balances it:
2,048 rows x 20,480 response tokens after prompts of 2,560, verl's tensors at their dtypes (`prompts`,
`responses`, `input_ids`, `attention_mask`, `position_ids`, `response_mask`, `rm_scores`), 10 assistant turns per
row separated by tool outputs, with the agent loop's records (`purify_turns`, `purify_generated_tokens`,
`purify_roc_counts`, `purify_failed_calls`, SAAR's spliced spans); a fifth of the turns kept a failed call and a
tenth of the rows end in a void turn. RoC runs at n = 32 (64 prompts x 32 rollouts, cut to 16), as
`qwen3_4b_roc_matched`, the other modes at n = 16. For each mode it times what `cleaner.verl.purification` adds
to the driver's step, in the trainer's order:

- `roc`: RoC's selection and the stand-in verl's `_balance_batch` balances instead of the batch (the kept rows'
  attention masks and uids); verl's reorder then copies only the kept rows, padded to 8 prompts x 32 rows;
- `masks`: the mode's masks before verl's advantage estimator and the void rows' loss mask after it;
- `audit`: the `purify/*` audit of the batch (`legacy_audit`), RoC's removed rows included.

verl's own estimator is not timed (it runs in every mode), nor is verl's `_balance_batch` reorder (a copy of every
row it keeps), which the table is followed by for scale: of the whole batch, and of RoC's kept rows. Each figure
is the median of `--repeats` runs. The last line, `per step: <seconds> s`, is the slowest mode's total.

Usage: .venv/bin/python benchmarks/purification_cost.py [--rows 2048] [--tokens 20480] [--prompt 2560]
       [--turns 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from verl import DataProto

from cleaner.purify.config import Purification, PurificationConfig
from cleaner.purify.failed_calls import FAILED_CALLS_KEY, FailedCall
from cleaner.purify.roc import RocCounts
from cleaner.purify.turns import GENERATED_TOKENS_KEY, ROC_COUNTS_KEY, TURNS_KEY, Turn
from cleaner.verl import purification

ROC_N = 32  # qwen3_4b_roc(_matched): 32 rollouts per prompt, cut to 16
OTHER_N = 16  # qwen3_4b_cleaner: 16 rollouts per prompt
PPO_MINI_BATCH_SIZE = 8  # prompts per mini-batch: 8 x 32 = 256 rows, the legacy padding multiple
SPLICED = purification.SPLICED_SPANS


def row_records(rng: random.Random, tokens: int, turns: int) -> tuple[list[int], dict]:
    """One row: `turns` turns of model tokens (mask 1) with tool outputs between them (mask 0)."""
    mask = [0] * tokens
    width = tokens // turns
    records, failed_calls, spans = [], [], []
    for index in range(turns):
        start = index * width
        end = start + int(width * rng.uniform(0.5, 0.8))
        mask[start:end] = [1] * (end - start)
        code_start = start + (end - start) // 2
        failed = rng.random() < 0.2 and index < turns - 1
        last = index == turns - 1
        void = last and rng.random() < 0.1
        records.append(
            Turn(start, end, None if last else code_start, None if last else end, call=not last, answer=last and not void,
                 failed=failed, void=void).to_dict()
        )  # fmt: skip
        if failed:
            failed_calls.append(
                FailedCall(0, ("runtime_error",), end - start, end - code_start, "kept", start, end, code_start, end)
            )
        if not failed and rng.random() < 0.1:
            spans.append([start, end, 1, "shallow"])
    counts = RocCounts(turns - 1, sum(turn["failed"] for turn in records), 1, 1, turns - 1)
    extra = {
        TURNS_KEY: records,
        GENERATED_TOKENS_KEY: sum(mask) + sum(call.turn_tokens for call in failed_calls),
        ROC_COUNTS_KEY: counts.to_dict(),
        FAILED_CALLS_KEY: [call.to_dict() for call in failed_calls],
        SPLICED: spans,
    }
    return mask, extra


def synthetic_batches(rows: int, tokens: int, prompt: int, turns: int, seed: int = 0) -> dict[int, DataProto]:
    """The batch grouped as `qwen3_4b_cleaner` (n = 16) and as `qwen3_4b_roc_matched` (n = 32): one set of tensors."""
    rng = random.Random(seed)
    masks, extras = zip(*(row_records(rng, tokens, turns) for _ in range(rows)), strict=True)
    response_mask = torch.tensor(masks, dtype=torch.int64)
    scores = torch.zeros(rows, tokens)
    scores[:, -1] = torch.tensor([float(rng.random() < 0.5) for _ in range(rows)])
    attention = torch.cat([torch.ones(rows, prompt, dtype=torch.int64), torch.ones_like(response_mask)], dim=1)
    tensors = {
        "prompts": torch.randint(0, 150_000, (rows, prompt)),
        "responses": torch.randint(0, 150_000, (rows, tokens)),
        "input_ids": torch.randint(0, 150_000, (rows, prompt + tokens)),
        "attention_mask": attention,
        "position_ids": torch.cumsum(attention, dim=1) - 1,
        "response_mask": response_mask,
        "rm_scores": scores,
    }
    columns = {}
    for key in extras[0]:
        column = np.empty(rows, dtype=object)
        column[:] = [extra[key] for extra in extras]
        columns[key] = column
    return {
        n: DataProto.from_dict(
            tensors=tensors,
            non_tensors={**columns, "uid": np.array([f"prompt-{row // n}" for row in range(rows)], dtype=object)},
        )
        for n in (OTHER_N, ROC_N)
    }


def fresh(batch: DataProto) -> DataProto:
    """A batch sharing `batch`'s tensors but its own response mask and columns (the modes write those)."""
    tensors = dict(batch.batch.items())
    tensors["response_mask"] = tensors["response_mask"].clone()
    return DataProto.from_dict(tensors=tensors, non_tensors={k: v.copy() for k, v in batch.non_tensor_batch.items()})


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def run_mode(mode: Purification, batch: DataProto, n: int) -> dict[str, float]:
    config = PurificationConfig(purification=mode, roc_min_correct=2, roc_min_incorrect=2)
    purification._config, purification._rollout_n = config, n
    data = fresh(batch)
    figures = {"roc": 0.0}
    order = torch.randperm(len(data))  # verl's balanced order, of every row
    if mode is Purification.ROC:
        selected: list = []
        figures["roc"] = timed(
            lambda: selected.append(purification.roc_legacy_rows(config, data, PPO_MINI_BATCH_SIZE * n)[0])
        )
        figures["roc"] += timed(lambda: purification.balance_stand_in(data, selected[0]))
        order = selected[0][torch.randperm(len(selected[0]))]  # verl's balanced order, of the kept rows
    figures["reorder"] = timed(lambda: data.reorder(order))  # verl's balancing copy, not purification's
    # what verl's estimator would have written (not timed)
    data.batch["advantages"] = (data.batch["rm_scores"][:, -1:] - 0.5) * data.batch["response_mask"]
    loss_masked: list = []
    figures["masks"] = timed(lambda: loss_masked.append(purification.apply_legacy(config, data)))
    if loss_masked[0] is not None:
        figures["masks"] += timed(lambda: purification.loss_mask_rows(data, loss_masked[0]))
    figures["audit"] = timed(lambda: purification.legacy_audit(data))
    figures["rows"] = float(len(data))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=20480)
    parser.add_argument("--prompt", type=int, default=2560)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = synthetic_batches(args.rows, args.tokens, args.prompt, args.turns)
    print(
        f"{args.rows} rows x {args.tokens} response tokens (prompts {args.prompt}), {args.turns} turns per row; "
        f"seconds, median of {args.repeats}, one thread\n"
    )
    print("| mode | n | rows after | roc | masks | audit | total |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    reorder = {}
    for mode in Purification:
        n = ROC_N if mode is Purification.ROC else OTHER_N
        runs = [run_mode(mode, batches[n], n) for _ in range(args.repeats)]
        median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        total = median["roc"] + median["masks"] + median["audit"]
        reorder[mode] = median["reorder"]
        worst = max(worst, total)
        print(
            f"| {mode.value} | {n} | {int(median['rows'])} | {median['roc']:.3f} | {median['masks']:.3f} | "
            f"{median['audit']:.3f} | {total:.3f} |"
        )
    print(
        f"\nfor scale, verl's _balance_batch reorder: {reorder[Purification.NONE]:.3f} s for the whole batch, "
        f"{reorder[Purification.ROC]:.3f} s for RoC's kept rows"
    )
    print(f"per step: {worst:.2f} s")


if __name__ == "__main__":
    main()
