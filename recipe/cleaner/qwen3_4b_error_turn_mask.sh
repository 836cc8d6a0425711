#!/usr/bin/env bash
# CLEANER-4B's run with error-turn masking: trajectories stay as sampled; failed turns get loss mask 0.
# Everything it trains with: config/qwen3_4b_error_turn_mask.yaml and its parents. Arguments are Hydra overrides (they win);
# DRY_RUN=1 runs the trainer-start checks and prints the config instead of training (recipe/cleaner/README.md).
set -euo pipefail

# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh" # DATA_DIR, MODEL_DIR, OUTPUT_ROOT, JUDGE_URL, DRY_RUN

exec "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name qwen3_4b_error_turn_mask "$@"
