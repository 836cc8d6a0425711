#!/usr/bin/env bash
# CLEANER-4B with the IS-gated rollback ("Plan B", docs/saar.md "Off-policy spans"): a retry whose importance
# ratio in its post-splice context is below the threshold is appended (failed turn, error and retry stay);
# otherwise SAAR replaces. The rollout server must return prompt log-probs (verl's vLLM and SGLang servers do).
# Everything it trains with: config/qwen3_4b_cleaner_is_gate.yaml and its parents. Arguments are Hydra overrides (they win);
# DRY_RUN=1 runs the trainer-start checks and prints the config instead of training (recipe/cleaner/README.md).
set -euo pipefail

# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh" # DATA_DIR, MODEL_DIR, OUTPUT_ROOT, JUDGE_URL, DRY_RUN

exec "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name qwen3_4b_cleaner_is_gate "$@"
