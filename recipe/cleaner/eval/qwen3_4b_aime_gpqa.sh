#!/usr/bin/env bash
# The reference's evaluation of CLEANER-4B on AIME 2024, AIME 2025 and GPQA-Diamond: n=16, temperature 1.0,
# top_p 0.6, float16, and test-time SAAR ON (K=3), as its 4B AIME/GPQA script runs it. eval_aime_gpqa.sh is
# the same evaluation for any model (test-time SAAR off by default); report both settings.
#   MODEL_PATH=...  TEST_TIME_SAAR=on|off  BENCHMARKS="aime2024 aime2025 gpqa-diamond"
# Extra arguments are Hydra overrides for every run.
set -euo pipefail

: "${TEST_TIME_SAAR:=on}"
: "${VAL_N:=16}"
: "${BENCHMARKS:=aime2024 aime2025 gpqa-diamond}"
# shellcheck source=recipe/cleaner/eval/eval_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/eval_common.sh"

cleaner_eval_benchmarks "$@"
