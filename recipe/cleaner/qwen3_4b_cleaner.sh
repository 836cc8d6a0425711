#!/usr/bin/env bash
# CLEANER-4B: Qwen3-4B-RA-SFT trained with GRPO + SAAR (K=3, applied to every trajectory) on the full 30K set.
# Settings come from the environment (see recipe/cleaner/README.md); extra arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen3-4B-CLEANER}"
: "${ACTOR_LR:=2e-6}"
: "${ENABLE_TOOL_ROLLBACK:=True}"
: "${ROLLBACK_PROBABILITY:=1.0}"
: "${GPU_MEMORY_UTILIZATION:=0.80}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${MODEL_PATH:=$MODEL_DIR/Qwen3-4B-RA-SFT}"
: "${TRAIN_FILES:=$DATA_DIR/open-agentrl-30k.parquet}"
: "${VAL_FILES:=$DATA_DIR/aime2024.parquet $DATA_DIR/aime2025.parquet}"

cleaner_train tools "$@"
