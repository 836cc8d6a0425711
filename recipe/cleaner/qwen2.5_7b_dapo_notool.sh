#!/usr/bin/env bash
# Baseline: Qwen2.5-7B-RA-SFT trained with GRPO/DAPO without tools; the 4B no-tool baseline with the 7B model
# and its learning rate.
# Everything it trains with: config/qwen2.5_7b_dapo_notool.yaml and its parents. Arguments are Hydra overrides (they win);
# DRY_RUN=1 runs the trainer-start checks and prints the config instead of training (recipe/cleaner/README.md).
set -euo pipefail

# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh" # DATA_DIR, MODEL_DIR, OUTPUT_ROOT, JUDGE_URL, DRY_RUN

exec "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name qwen2.5_7b_dapo_notool "$@"
