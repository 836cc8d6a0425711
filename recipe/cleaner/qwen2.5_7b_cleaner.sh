#!/usr/bin/env bash
# CLEANER-7B: CLEANER-4B's setup with Qwen2.5-7B-RA-SFT, SAAR on 70 % of trajectories, its learning rate, and
# the success-rate-filtered set (data_filter.sh).
# Everything it trains with: config/qwen2.5_7b_cleaner.yaml and its parents. Arguments are Hydra overrides (they win);
# DRY_RUN=1 runs the trainer-start checks and prints the config instead of training (recipe/cleaner/README.md).
set -euo pipefail

# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh" # DATA_DIR, MODEL_DIR, OUTPUT_ROOT, JUDGE_URL, DRY_RUN

exec "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name qwen2.5_7b_cleaner "$@"
