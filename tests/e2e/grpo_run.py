"""The real GRPO run that test_train_cpu_e2e.py and test_eval_cpu_e2e.py read (fixture `grpo_run` in conftest.py).

verl's real trainer (`python -m verl.trainer.main_ppo` through the CPU recipe) trains one step on the scripted
problems with SAAR's off-policy options on (`scripted_training.py`, `cpu_scripted_backend.py`), then runs one
validation pass with test-time SAAR, dumping each trajectory with its reward and `saar_*` fields, as the evaluation
recipe's validation-only run does. Its metrics go to the console, verl's file logger and wandb (offline, in the
run's directory), the trackers a user watches. One run serves the training, evaluation and tracker checks: each
real trainer run costs minutes.
"""

from __future__ import annotations

from pathlib import Path

ROLLOUT_N = 2
VAL_N = 2
BENCHMARK = "demo-math"  # the label the evaluation checks give the dump (`cleaner eval score NAME=PATH`)
VALIDATION_DIR = "validation"  # verl's generation dump, under the run's output directory


def run_scripted_grpo(work: Path, model_dir: Path, judge_url: str) -> dict:
    """Train one step and validate once; returns `train_one_scripted_step`'s answer plus the dump's directory."""
    from cpu_scripted_backend import BATCH_DUMP_ENV
    from scripted_training import train_one_scripted_step

    out = work / "out"
    extra_env = {"WANDB_MODE": "offline", "WANDB_DIR": str(out)}
    overrides = [
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "++actor_rollout_ref.rollout.multi_turn.rollback_is_threshold=0.5",
        "++actor_rollout_ref.rollout.multi_turn.rollback_is_correction=True",  # with rollout_is=token
        "algorithm.rollout_correction.rollout_is=token",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        # the validation pass after the step, with the generation dump the evaluation checks read
        "trainer.test_freq=1",
        f"actor_rollout_ref.rollout.val_kwargs.n={VAL_N}",
        f"trainer.validation_data_dir={out / VALIDATION_DIR}",
        "trainer.logger=[console,file,wandb]",
    ]
    run = train_one_scripted_step(work, model_dir, judge_url, ROLLOUT_N, BATCH_DUMP_ENV, extra_env, overrides)
    return {**run, "validation": out / VALIDATION_DIR}
