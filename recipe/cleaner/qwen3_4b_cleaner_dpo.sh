#!/usr/bin/env bash
# The paper's negative-sample ablation on CLEANER-4B: every recovered failure kept as a negative sample paired
# with the call that replaced it, and the DPO-style tool-call advantage (docs/negative-samples.md); the paper
# reports that it destabilised training. Needs verl's v1 trainer (the legacy one is refused). The adjustment
# is computed on the log-probs the trainer recomputes on the purified sequence.
# Everything it trains with: config/qwen3_4b_cleaner_dpo.yaml and its parents. Arguments are Hydra overrides (they win);
# DRY_RUN=1 runs the trainer-start checks and prints the config instead of training (recipe/cleaner/README.md).
set -euo pipefail

# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/launch.sh" # DATA_DIR, MODEL_DIR, OUTPUT_ROOT, JUDGE_URL, DRY_RUN

exec "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name qwen3_4b_cleaner_dpo "$@"
