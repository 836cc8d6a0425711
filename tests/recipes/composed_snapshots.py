"""What every recipe composes to, as the leaves that differ from verl's stock `ppo_trainer`, and their generator.

    python tests/recipes/composed_snapshots.py REVISION   # rewrites data/composed/ from REVISION's config files

`data/composed/<case>.json` holds, for each case below, the configs the recipe files of one git revision
(`data/composed/REVISION`) compose to, run by run, with the paths the scripts export; paths in the checkout are
written as `<root>`. The generator extracts that revision's `recipe/cleaner/config/` with `git archive` and composes
it with the installed verl; `test_recipe_configs_unchanged.py` composes today's files the same way and compares.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "tests" / "recipes" / "data" / "composed"
REVISION_FILE = SNAPSHOTS / "REVISION"
CONFIG_PATH = "recipe/cleaner/config"
RECIPE_CONFIGS = ROOT / CONFIG_PATH
DELETED = "<deleted>"

PREPARED, EVAL_CPU, OUTPUT = f"{ROOT}/dataset/prepared", f"{ROOT}/dataset/eval-cpu", f"{ROOT}/output"
# The paths launch.sh exports, and cpu_process.sh's Ray temp dir.
SCRIPT_ENV = {
    "CLEANER_ROOT": str(ROOT),
    "DATA_DIR": PREPARED,
    "MODEL_DIR": f"{ROOT}/pretrained_models",
    "OUTPUT_ROOT": OUTPUT,
    "CLEANER_RAY_TMP": "/tmp/cleaner-ray-abcdef",
}
# What train_cpu.sh exports besides.
TRAIN_CPU_ENV = {
    "MODEL_PATH": "/models/m",
    "TRAIN_FILES": "/data/train.parquet",
    "VAL_FILES": "/data/val.parquet",
    "OUTPUT_DIR": "/out/train-cpu",
}
# Unset for every case: the default judge, the default Ray CPUs, no CPU-run inputs (CLEANER_TOOL_CONFIG: read by
# older revisions' files).
UNSET = ("JUDGE_URL", "CLEANER_TOOL_CONFIG", "RAY_NUM_CPUS", "MODEL_PATH", "TRAIN_FILES", "VAL_FILES", "OUTPUT_DIR")

TRAINING = [
    "qwen3_4b_cleaner",
    "qwen3_4b_cleaner_dpo",
    "qwen3_4b_cleaner_is_gate",
    "qwen3_4b_cleaner_is_correction",
    "qwen3_4b_cleaner_one_tolerance",
    "qwen2.5_7b_cleaner",
    "qwen3_4b_dapo_tool",
    "qwen2.5_7b_dapo_tool",
    "qwen3_4b_dapo_notool",
    "qwen2.5_7b_dapo_notool",
    "qwen3_4b_no_purification",
    "qwen3_4b_error_turn_mask",
    "qwen3_4b_void_turn_filter",
    "qwen3_4b_error_trajectory_filter",
    "qwen3_4b_roc",
    "qwen3_4b_roc_matched",
]
AIME_GPQA = ["aime2024", "aime2025", "gpqa-diamond"]
# make train-cpu's settings (Makefile TRAIN_CPU_ARGS)
MAKE_TRAIN_CPU = [
    "actor_rollout_ref.model.lora_rank=16",
    "actor_rollout_ref.actor.optim.lr=1e-5",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "actor_rollout_ref.rollout.dtype=bfloat16",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bfloat16",
]

Run = tuple[str, list[str]]


def evaluation(benchmarks, data, out, name, n, saar, extra=(), cpu=False, mode="tools") -> list[Run]:
    """What eval_common.sh runs for each benchmark: eval_<mode> with its per-benchmark overrides."""
    suffix = ".notool" if mode == "notool" else ""
    return [
        (
            f"eval_{mode}",
            [
                *(["+platform=cpu"] if cpu else []),
                "actor_rollout_ref.model.path=/models/m",
                f"data.train_files=['{data}/{bench}{suffix}.parquet']",
                f"data.val_files=['{data}/{bench}{suffix}.parquet']",
                f"actor_rollout_ref.rollout.val_kwargs.n={n}",
                f"trainer.experiment_name={name}",
                f"trainer.default_local_dir={out}/checkpoints",
                f"trainer.validation_data_dir={out}/generations/{bench}",
                *([f"test_time_saar={saar}"] if mode == "tools" else []),
                *extra,
            ],
        )
        for bench in benchmarks
    ]


# case -> the runs its script starts: (config name, overrides)
CASES: dict[str, list[Run]] = {
    **{name: [(name, [])] for name in TRAINING},
    "eval_aime_gpqa_saar_off": evaluation(
        AIME_GPQA, PREPARED, f"{OUTPUT}/eval-m-saar-off", "eval-m-saar-off", 16, "off"
    ),
    "eval_aime_gpqa_saar_on": evaluation(AIME_GPQA, PREPARED, f"{OUTPUT}/eval-m-saar-on", "eval-m-saar-on", 16, "on"),
    "eval_aime_gpqa_notool": evaluation(
        AIME_GPQA, PREPARED, f"{OUTPUT}/eval-m-saar-off", "eval-m-saar-off", 16, "off", mode="notool"
    ),
    "eval_livecodebench": evaluation(
        ["livecodebench-v6"], PREPARED, f"{OUTPUT}/eval-m-saar-off", "eval-m-saar-off", 10, "off"
    ),
    "eval_qwen3_4b_aime_gpqa": evaluation(AIME_GPQA, PREPARED, f"{OUTPUT}/eval-m-saar-on", "eval-m-saar-on", 16, "on"),
    "eval_qwen2.5_7b_aime_gpqa": evaluation(
        AIME_GPQA,
        PREPARED,
        f"{OUTPUT}/eval-m-saar-off",
        "eval-m-saar-off",
        32,
        "off",
        ["actor_rollout_ref.rollout.dtype=bfloat16", "actor_rollout_ref.actor.fsdp_config.dtype=bfloat16"],
    ),
    "eval_cpu_aime_gpqa": evaluation(
        ["aime2024", "gpqa-diamond"],
        EVAL_CPU,
        "/out/eval-cpu/aime-gpqa",
        "eval-cpu-aime-gpqa-saar-on",
        2,
        "on",
        cpu=True,
    ),
    "eval_cpu_livecodebench": evaluation(
        ["livecodebench-v6"],
        EVAL_CPU,
        "/out/eval-cpu/livecodebench",
        "eval-cpu-livecodebench-saar-off",
        2,
        "off",
        cpu=True,
    ),
    "train_cpu": [("train_cpu", [])],
    "train_cpu_make": [("train_cpu", MAKE_TRAIN_CPU)],
}


def case_environment(case: str) -> dict[str, str]:
    return {**SCRIPT_ENV, **(TRAIN_CPU_ENV if case.startswith("train_cpu") else {})}


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value


def _normalised(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"/tmp/cleaner-ray-\w+", "<ray-tmp>", value.replace(str(ROOT), "<root>"))
    if isinstance(value, list):
        return [_normalised(item) for item in value]
    return value


def changed_leaves(config: DictConfig, stock: DictConfig) -> dict[str, Any]:
    """{dotted key: value} for every leaf of `config` that is not verl's stock value (`<deleted>`: not there at all)."""
    composed = dict(_leaves(OmegaConf.to_container(config, resolve=True)))
    default = dict(_leaves(OmegaConf.to_container(stock, resolve=True)))
    changed = {key: _normalised(value) for key, value in composed.items() if default.get(key, DELETED) != value}
    changed.update({key: DELETED for key in default if key not in composed})
    return changed


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """The process environment set to `values` (and the UNSET keys removed) inside a `with` block."""
    saved = dict(os.environ)
    for key in UNSET:
        os.environ.pop(key, None)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def compose_case(case: str, config_dir: Path, stock: DictConfig) -> list[dict[str, Any]]:
    """The changed leaves of each run of `case`, composed from the recipe files in `config_dir`."""
    with environment(case_environment(case)):
        return [changed_leaves(compose(name, overrides, config_dir), stock) for name, overrides in CASES[case]]


def compose(name: str, overrides: Sequence[str] = (), config_dir: Path = RECIPE_CONFIGS) -> DictConfig:
    """The recipe config `name` with `overrides`, as its script's `main_ppo --config-dir --config-name` line composes it."""
    from cleaner.verl.trainer_config import compose_trainer_config

    return compose_trainer_config(overrides, name, config_dir)


def stock_config() -> DictConfig:
    from cleaner.verl.trainer_config import compose_trainer_config

    return compose_trainer_config()


def extract_configs(revision: str, target: Path) -> Path:
    """`recipe/cleaner/config/` as it is at git `revision`, written under `target`; returns its path there."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, CONFIG_PATH], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / CONFIG_PATH


def compose_revision(revision: str) -> dict[str, list[dict[str, Any]]]:
    """Every case composed from `revision`'s recipe files."""
    stock = stock_config()
    with tempfile.TemporaryDirectory() as scratch:
        config_dir = extract_configs(revision, Path(scratch))
        return {case: compose_case(case, config_dir, stock) for case in CASES}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    [revision] = argv
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{revision}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    for stale in SNAPSHOTS.glob("*.json"):
        stale.unlink()
    for case, runs in compose_revision(commit).items():
        (SNAPSHOTS / f"{case}.json").write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    REVISION_FILE.write_text(commit + "\n")
    print(f"{len(CASES)} cases of {commit} in {SNAPSHOTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
