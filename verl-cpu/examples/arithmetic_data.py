"""Write a small GRPO data set for verl: two-number sums, one chat prompt each, the answer in `\\boxed{}`.

    python arithmetic_data.py OUT_DIR [--train 64] [--val 8] [--seed 0]

Rows have verl's RLHF columns (`data_source`, `prompt` as chat messages, `reward_model.ground_truth`,
`extra_info`); without an `agent_name` column verl's agent loop manager runs its default `single_turn_agent`.
Prints the train and validation paths.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pandas as pd

DATA_SOURCE = "arithmetic"


def rows(count: int, rng: random.Random, split: str) -> list[dict]:
    out = []
    for index in range(count):
        left, right = rng.randint(10, 99), rng.randint(10, 99)
        question = f"What is {left} + {right}? Answer with the number in \\boxed{{}}."
        out.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(left + right)},
                "extra_info": {"split": split, "index": index},
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--train", type=int, default=64)
    parser.add_argument("--val", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    train, val = args.out_dir / "train.parquet", args.out_dir / "val.parquet"
    pd.DataFrame(rows(args.train, rng, "train")).to_parquet(train)
    pd.DataFrame(rows(args.val, rng, "val")).to_parquet(val)
    print(train, val)


if __name__ == "__main__":
    main()
