#!/usr/bin/env bash
# Evaluate a model on LiveCodeBench v6 with the paper's protocol: n=10 samples per problem, temperature 1.0,
# top_p 0.6, test-time SAAR off by default. One verl validation-only run, then the programs are exported in
# LiveCodeBench's custom-evaluation format and scored on code-judge against the hidden tests.
#   MODEL_PATH=...  TEST_TIME_SAAR=on|off  MODE=tools|notool  JUDGE_URL=http://127.0.0.1:8088
# Extra arguments are Hydra overrides.
set -euo pipefail

: "${VAL_N:=10}"
: "${BENCHMARKS:=livecodebench-v6}"
# shellcheck source=recipe/cleaner/eval/eval_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/eval_common.sh"

cleaner_eval_benchmarks "$@"
if recipe_launching; then
    "$PYTHON" -m cleaner.cli eval lcb-score \
        --generations "livecodebench-v6=$OUTPUT_DIR/generations/livecodebench-v6" \
        --dataset "$(cleaner_eval_file livecodebench-v6)" \
        --judge-url "${JUDGE_URL:-$CLEANER_DEFAULT_JUDGE_URL}" \
        --output-dir "$OUTPUT_DIR/livecodebench-judged" \
        --run "model=$MODEL_PATH" --run "test_time_saar=$TEST_TIME_SAAR" --run "n=$VAL_N"
fi
