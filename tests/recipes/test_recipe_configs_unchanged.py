"""Every recipe config composes to the verl config its bash recipe composed, except where a difference is named.

`data/composed_before/<case>.json` are the bash recipes' configs (common.sh, commit 96aa44e: each script's
PRINT_COMMAND=1 lines composed with verl's `ppo_trainer` and resolved), kept as the leaves that differ from verl's
stock config (`composed_leaves.py`), a few KB each. The bash route no longer exists, so the snapshots are the
reference; here each case is composed from `recipe/cleaner/config/` the way its script runs it, with the paths
the scripts export.
"""

from __future__ import annotations

import json

import pytest
from composed_leaves import ROOT, changed_leaves

from cleaner.recipes.compose import compose_recipe
from cleaner.verl.trainer_config import compose_trainer_config

pytestmark = pytest.mark.slow  # composes 27 configs with verl's Hydra config

BEFORE = ROOT / "tests" / "recipes" / "data" / "composed_before"
PREPARED, EVAL_CPU, OUTPUT = f"{ROOT}/dataset/prepared", f"{ROOT}/dataset/eval-cpu", f"{ROOT}/output"
RECIPES = [
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
TRAIN_CPU_ENV = {
    "MODEL_PATH": "/models/m",
    "TRAIN_FILES": "/data/train.parquet",
    "VAL_FILES": "/data/val.parquet",
    "OUTPUT_DIR": "/out/train-cpu",
}
# The differences, each deliberate: key -> (before, after), for the cases it applies to.
TRAIN_CPU_DIFFERENCES = {
    # The CPU run logs to wandb (offline) too, so that a test can read back what a GPU run's tracker shows.
    "trainer.logger": (["console", "file"], ["console", "file", "wandb"]),
    # Named after its entry point, train_cpu.sh.
    "trainer.experiment_name": ("cpu-smoke", "train-cpu"),
    "actor_rollout_ref.rollout.trace.experiment_name": ("cpu-smoke", "train-cpu"),
    # Inherited from qwen3_4b_cleaner.yaml; before, the key was unset and SaarConfig's default is the same 1.0.
    "actor_rollout_ref.rollout.multi_turn.rollback_probability": ("<absent>", 1.0),
}
# The gate recipe states the reference's statistic and scores with the rollout's own log-probs (docs/recipes.md).
IS_GATE_DIFFERENCES = {
    "actor_rollout_ref.rollout.calculate_log_probs": (False, "<absent>"),  # true: verl's stock value
    "actor_rollout_ref.rollout.multi_turn.rollback_is_statistic": ("<absent>", "token_mean"),
}
NAMED_DIFFERENCES = {
    "train_cpu": TRAIN_CPU_DIFFERENCES,
    "train_cpu_make": TRAIN_CPU_DIFFERENCES,
    "qwen3_4b_cleaner_is_gate": IS_GATE_DIFFERENCES,
}


def evaluation(benchmarks, data, out, name, n, saar, extra=(), cpu=False):
    """What eval_common.sh runs for each benchmark: eval_tools with its per-benchmark overrides."""
    return [
        (
            "eval_tools",
            [
                *(["+platform=cpu"] if cpu else []),
                "actor_rollout_ref.model.path=/models/m",
                f"data.train_files=['{data}/{bench}.parquet']",
                f"data.val_files=['{data}/{bench}.parquet']",
                f"actor_rollout_ref.rollout.val_kwargs.n={n}",
                f"trainer.experiment_name={name}",
                f"trainer.default_local_dir={out}/checkpoints",
                f"trainer.validation_data_dir={out}/generations/{bench}",
                f"test_time_saar={saar}",
                *extra,
            ],
        )
        for bench in benchmarks
    ]


CASES = {
    **{name: [(name, [])] for name in RECIPES},
    "eval_aime_gpqa_saar_off": evaluation(
        AIME_GPQA, PREPARED, f"{OUTPUT}/eval-m-saar-off", "eval-m-saar-off", 16, "off"
    ),
    "eval_aime_gpqa_saar_on": evaluation(AIME_GPQA, PREPARED, f"{OUTPUT}/eval-m-saar-on", "eval-m-saar-on", 16, "on"),
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


@pytest.fixture(scope="module")
def stock():
    return compose_trainer_config([])


@pytest.fixture(autouse=True)
def script_environment(monkeypatch):
    """The paths launch.sh exports, the CPU run's inputs (train_cpu.sh) and cpu_process.sh's Ray temp dir."""
    for key, value in {
        "CLEANER_ROOT": str(ROOT),
        "DATA_DIR": PREPARED,
        "MODEL_DIR": f"{ROOT}/pretrained_models",
        "OUTPUT_ROOT": OUTPUT,
        "CLEANER_RAY_TMP": "/tmp/cleaner-ray-abcdef",
        **TRAIN_CPU_ENV,
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("JUDGE_URL", "CLEANER_TOOL_CONFIG", "RAY_NUM_CPUS"):
        monkeypatch.delenv(key, raising=False)


def differences(before: dict, after: dict) -> dict[str, tuple]:
    return {
        key: (before.get(key, "<absent>"), after.get(key, "<absent>"))
        for key in sorted(set(before) | set(after))
        if before.get(key, "<absent>") != after.get(key, "<absent>")
    }


def test_every_snapshot_has_a_case():
    assert {path.stem for path in BEFORE.glob("*.json")} == set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_the_config_files_compose_what_the_bash_recipes_composed(case, stock):
    before = json.loads((BEFORE / f"{case}.json").read_text())
    after = [changed_leaves(compose_recipe(name, overrides), stock) for name, overrides in CASES[case]]
    assert len(after) == len(before)
    for run_before, run_after in zip(before, after):
        assert differences(run_before, run_after) == NAMED_DIFFERENCES.get(case, {})
