#!/usr/bin/env bash
# Evaluate a model on AIME 2024, AIME 2025 and GPQA-Diamond with the paper's protocol: n=16 samples per
# problem, temperature 1.0, top_p 0.6. Each benchmark is one verl validation-only run (trainer.val_only=True:
# no training step), then `cleaner eval score` prints and saves pass@1, pass@k, maj@n and SAAR metrics.
#   MODEL_PATH=...  TEST_TIME_SAAR=on|off  MODE=tools|notool  BENCHMARKS="aime2024 aime2025 gpqa-diamond"
# Extra arguments are Hydra overrides for every run.
set -euo pipefail

: "${VAL_N:=16}"
: "${BENCHMARKS:=aime2024 aime2025 gpqa-diamond}"
# shellcheck source=recipe/cleaner/eval/eval_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/eval_common.sh"

cleaner_eval_benchmarks "$@"
