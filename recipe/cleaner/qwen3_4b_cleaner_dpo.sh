#!/usr/bin/env bash
# The paper's negative-sample ablation on CLEANER-4B: GRPO + SAAR exactly as qwen3_4b_cleaner.sh, plus every
# recovered failure kept as a negative sample paired with the call that replaced it, and the DPO-style
# tool-call advantage (docs/negative-samples.md). The paper reports that it destabilised training; the recipe
# is here to reproduce that and to try fixes. It needs verl's v1 trainer (the legacy one is refused).
# Settings come from the environment (see recipe/cleaner/README.md); extra arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen3-4B-CLEANER-DPO}"
: "${ACTOR_LR:=2e-6}"
: "${ENABLE_TOOL_ROLLBACK:=True}"
: "${ROLLBACK_PROBABILITY:=1.0}"
# The DPO adjustment is computed on the log-probs the trainer recomputes on the purified sequence.
: "${GPU_MEMORY_UTILIZATION:=0.80}"
# Negative samples and the adjustment (the reference's keys; beta and the cap at its defaults).
: "${ADV_ESTIMATOR:=grpo_tool_dpo}" # or dapo_tool_dpo
: "${MAX_NEGATIVE_SAMPLES_PER_GROUP:=1}"
: "${USE_DPO_ON_TOOL_CALLS:=True}"
: "${DPO_BETA:=0.1}"
: "${DPO_MAX_ADJUSTMENT_RATIO:=0.1}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${MODEL_PATH:=$MODEL_DIR/Qwen3-4B-RA-SFT}"
: "${TRAIN_FILES:=$DATA_DIR/open-agentrl-30k.parquet}"
: "${VAL_FILES:=$DATA_DIR/aime2024.parquet $DATA_DIR/aime2025.parquet}"

cleaner_train tools \
    trainer.use_v1=True \
    "algorithm.adv_estimator=$ADV_ESTIMATOR" \
    "+algorithm.use_dpo_on_tool_calls=$USE_DPO_ON_TOOL_CALLS" \
    "+algorithm.dpo_beta=$DPO_BETA" \
    "+algorithm.dpo_max_adjustment_ratio=$DPO_MAX_ADJUSTMENT_RATIO" \
    +actor_rollout_ref.rollout.multi_turn.save_negative_samples=True \
    "+actor_rollout_ref.rollout.multi_turn.max_negative_samples_per_group=$MAX_NEGATIVE_SAMPLES_PER_GROUP" \
    "$@"
