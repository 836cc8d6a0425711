#!/usr/bin/env bash
# CLEANER-4B's run that drops every training trajectory that kept a failed tool call.
# Everything it trains with: config/qwen3_4b_error_trajectory_filter.yaml and its parents. Arguments are Hydra overrides (they win);
# DRY_RUN=1 runs the trainer-start checks and prints the config instead of training (recipe/cleaner/README.md).
set -euo pipefail

# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh" # DATA_DIR, MODEL_DIR, OUTPUT_ROOT, JUDGE_URL, DRY_RUN

exec "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name qwen3_4b_error_trajectory_filter "$@"
