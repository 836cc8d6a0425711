#!/usr/bin/env bash
# `make eval-cpu`: the evaluation scripts end to end on a CPU machine (docs/evaluation.md). eval_aime_gpqa.sh and
# eval_livecodebench.sh run with PLATFORM=cpu on the bundled sets (dataset/eval-cpu), n=2 samples per problem,
# with test-time SAAR on and off, against one code-judge started here; then one `cleaner eval score` table over
# the six dumps, and the LiveCodeBench generations exported in LiveCodeBench's custom-evaluation format.
# Everything goes to $OUTPUT_ROOT (default eval-cpu-output/); all it starts is stopped.
#   MODEL_PATH=...  (make eval-cpu converts the demo's 0.5B model)
# Extra arguments are Hydra overrides for every run. DRY_RUN=1 checks and prints each run's config.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
EVAL_DIR="$ROOT/recipe/cleaner/eval"
: "${MODEL_PATH:?set MODEL_PATH to a Hugging Face model directory (make eval-cpu builds the 0.5B one)}"
: "${PYTHON:=$ROOT/.venv/bin/python}"
: "${OUTPUT_ROOT:=$ROOT/eval-cpu-output}"
: "${DATA_DIR:=$ROOT/dataset/eval-cpu}"
: "${VAL_N:=2}"
: "${SAAR_SETTINGS:=on off}"
# shellcheck source=recipe/cleaner/launch.sh
source "$ROOT/recipe/cleaner/launch.sh"
# shellcheck source=recipe/cleaner/cpu_process.sh
source "$ROOT/recipe/cleaner/cpu_process.sh"
export MODEL_PATH PYTHON OUTPUT_ROOT DATA_DIR VAL_N PLATFORM=cpu
if recipe_launching; then
    "$PYTHON" -m cleaner.models check "$MODEL_PATH" >/dev/null # not a model: stop before anything starts
    cpu_start_judge "$OUTPUT_ROOT" # one judge for every run below
fi

generations=()
for saar in $SAAR_SETTINGS; do
    out="$OUTPUT_ROOT/saar-$saar"
    recipe_launching && rm -rf "$out" # verl would add this run's dumps next to an earlier run's
    TEST_TIME_SAAR="$saar" BENCHMARKS="aime2024 gpqa-diamond" OUTPUT_DIR="$out/aime-gpqa" \
        EXPERIMENT_NAME="eval-cpu-aime-gpqa-saar-$saar" "$EVAL_DIR/eval_aime_gpqa.sh" "$@"
    TEST_TIME_SAAR="$saar" OUTPUT_DIR="$out/livecodebench" \
        EXPERIMENT_NAME="eval-cpu-livecodebench-saar-$saar" "$EVAL_DIR/eval_livecodebench.sh" "$@"
    recipe_launching || continue # a dry run made no generations to export or score
    "$PYTHON" -m cleaner.cli eval lcb-export --generations "$out/livecodebench/generations/livecodebench-v6" \
        --dataset "$DATA_DIR/livecodebench-v6.parquet" --output "$out/livecodebench/lcb_custom_evaluation.json"
    for bench in aime2024 gpqa-diamond; do
        generations+=(--generations "$bench (SAAR $saar)=$out/aime-gpqa/generations/$bench")
    done
    generations+=(--generations "livecodebench-v6 (SAAR $saar)=$out/livecodebench/generations/livecodebench-v6")
done
recipe_launching || exit 0

echo
echo "All runs (pass@k and maj@n from the reward's acc and pred in verl's validation dumps; SAAR columns from its saar_* fields):"
"$PYTHON" -m cleaner.cli eval score "${generations[@]}" --output-dir "$OUTPUT_ROOT" \
    --run "model=$MODEL_PATH" --run "n=$VAL_N" --run platform=cpu
