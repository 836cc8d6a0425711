#!/usr/bin/env bash
# Baseline: Qwen2.5-7B-RA-SFT trained with GRPO/DAPO without tools (single-turn generation, data prepared with
# `cleaner data prepare --no-tool`). Settings come from the environment (recipe/cleaner/README.md); extra
# arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen2.5-7B-DAPO-notool}"
: "${ACTOR_LR:=1e-6}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
: "${MODEL_PATH:=$MODEL_DIR/Qwen2.5-7B-RA-SFT}"
: "${TRAIN_FILES:=$DATA_DIR/filtered_sr.notool.parquet}"
: "${VAL_FILES:=$DATA_DIR/aime2024.notool.parquet $DATA_DIR/aime2025.notool.parquet}"

cleaner_train notool "$@"
