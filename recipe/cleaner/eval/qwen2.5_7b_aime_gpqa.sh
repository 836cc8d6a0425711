#!/usr/bin/env bash
# The reference's evaluation of CLEANER-7B on AIME 2024, AIME 2025 and GPQA-Diamond: n=32, temperature 1.0,
# top_p 0.6, bfloat16, test-time SAAR off, as its 7B AIME/GPQA script runs it.
#   MODEL_PATH=...  TEST_TIME_SAAR=on|off  BENCHMARKS="aime2024 aime2025 gpqa-diamond"
# Extra arguments are Hydra overrides for every run.
set -euo pipefail

: "${TEST_TIME_SAAR:=off}"
: "${VAL_N:=32}"
: "${BENCHMARKS:=aime2024 aime2025 gpqa-diamond}"
# shellcheck source=recipe/cleaner/eval/eval_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/eval_common.sh"

cleaner_eval_benchmarks actor_rollout_ref.rollout.dtype=bfloat16 actor_rollout_ref.actor.fsdp_config.dtype=bfloat16 "$@"
