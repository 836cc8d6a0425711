#!/usr/bin/env bash
# CLEANER-7B: Qwen2.5-7B-RA-SFT trained with GRPO + SAAR (K=3, on 70% of trajectories) on the
# success-rate-filtered set (data_filter.sh). Settings come from the environment (recipe/cleaner/README.md);
# extra arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen2.5-7B-CLEANER}"
: "${ACTOR_LR:=1e-6}"
: "${ENABLE_TOOL_ROLLBACK:=True}"
: "${ROLLBACK_PROBABILITY:=0.7}"
: "${GPU_MEMORY_UTILIZATION:=0.80}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${MODEL_PATH:=$MODEL_DIR/Qwen2.5-7B-RA-SFT}"
: "${TRAIN_FILES:=$DATA_DIR/filtered_sr.parquet}"
: "${VAL_FILES:=$DATA_DIR/aime2024.parquet $DATA_DIR/aime2025.parquet}"

cleaner_train tools "$@"
