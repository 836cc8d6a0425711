#!/usr/bin/env bash
# Baseline: Qwen3-4B-RA-SFT trained with GRPO/DAPO and the Python tool, without SAAR (failed tool calls stay
# in the trajectory). Same agent loop, tool and reward as CLEANER; rollout log-probs with sequence-level
# importance sampling. Settings come from the environment (recipe/cleaner/README.md); extra arguments
# are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen3-4B-DAPO-tool}"
: "${ACTOR_LR:=2e-6}"
: "${ENABLE_TOOL_ROLLBACK:=False}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${MODEL_PATH:=$MODEL_DIR/Qwen3-4B-RA-SFT}"
: "${TRAIN_FILES:=$DATA_DIR/filtered_sr.parquet}"
: "${VAL_FILES:=$DATA_DIR/aime2024.parquet $DATA_DIR/aime2025.parquet}"

cleaner_train tools "$@"
