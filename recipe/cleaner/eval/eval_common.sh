#!/usr/bin/env bash
# Shared part of the evaluation scripts (sourced): test-time SAAR switch, platform switch, one validation-only
# verl run per benchmark, then the results table. Uses recipe/cleaner/common.sh for everything else.
# PLATFORM=gpu (default) runs the recipes' GPU settings; PLATFORM=cpu runs verl's `cpu` platform with the
# `cpu` rollout backend of the verl-cpu package (cpu_platform.sh, docs/evaluation.md).

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    echo "eval_common.sh is a library: source it from an evaluation script" >&2
    exit 2
fi

: "${MODE:=tools}"
: "${TEST_TIME_SAAR:=off}"
: "${PLATFORM:=gpu}"
case "$TEST_TIME_SAAR" in
    on) : "${ENABLE_TOOL_ROLLBACK:=True}" "${ROLLBACK_IN_VALIDATION:=True}" "${ROLLBACK_PROBABILITY:=1.0}" ;;
    off) : "${ENABLE_TOOL_ROLLBACK:=False}" "${ROLLBACK_IN_VALIDATION:=False}" ;;
    *)
        echo "TEST_TIME_SAAR must be on or off, not '$TEST_TIME_SAAR'" >&2
        exit 2
        ;;
esac
case "$PLATFORM" in
    gpu) ;;
    cpu)
        # shellcheck source=recipe/cleaner/eval/cpu_platform.sh
        source "$(dirname "${BASH_SOURCE[0]}")/cpu_platform.sh"
        ;;
    *)
        echo "PLATFORM must be gpu or cpu, not '$PLATFORM'" >&2
        exit 2
        ;;
esac
# Training-only settings still have to compose; they do not affect a validation-only run.
: "${ACTOR_LR:=1e-6}"
# The benchmark doubles as the (never used) train set, and verl stops when that set is smaller than one
# training batch ("Train dataloader is empty!"): AIME's 30 problems are fewer than the recipes' 128.
: "${TRAIN_BATCH_SIZE:=1}"
: "${PPO_MINI_BATCH_SIZE:=1}"
# The reference's evaluation scripts allow 4096 prompt tokens (training: 2560); verl drops longer prompts.
: "${MAX_PROMPT_LENGTH:=4096}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
: "${MODEL_PATH:?set MODEL_PATH to the model directory (Hugging Face format) to evaluate}"
: "${EXPERIMENT_NAME:=eval-$(basename "$MODEL_PATH")-saar-$TEST_TIME_SAAR}"
: "${OUTPUT_DIR:=$OUTPUT_ROOT/$EXPERIMENT_NAME}"
if [[ "$PLATFORM" == "cpu" ]]; then
    cleaner_eval_cpu_start
fi

# The prepared file of a benchmark (no-tool models get the prompts without tool hints).
cleaner_eval_file() {
    if [[ "$MODE" == "notool" ]]; then
        printf '%s/%s.notool.parquet' "$DATA_DIR" "$1"
    else
        printf '%s/%s.parquet' "$DATA_DIR" "$1"
    fi
}

cleaner_eval_benchmarks() {
    local bench generations=()
    # MODEL_PATH is what gets evaluated: verl's default resume mode would load the latest checkpoint it finds in
    # $OUTPUT_DIR/checkpoints instead (e.g. with OUTPUT_DIR set to the training run's directory).
    local overrides=(trainer.resume_mode=disable "$@")
    for bench in $BENCHMARKS; do
        if [[ "$PLATFORM" == "cpu" ]]; then
            cleaner_eval_cpu_validate "$MODE" "$bench" "$(cleaner_eval_file "$bench")" "${overrides[@]}"
        else
            cleaner_validate "$MODE" "$bench" "$(cleaner_eval_file "$bench")" "${overrides[@]}"
        fi
        generations+=(--generations "$bench=$OUTPUT_DIR/generations/$bench")
    done
    cleaner_launching || return 0
    "$PYTHON" -m cleaner.cli eval score "${generations[@]}" --output-dir "$OUTPUT_DIR" \
        --run "model=$MODEL_PATH" --run "mode=$MODE" --run "test_time_saar=$TEST_TIME_SAAR" --run "n=$VAL_N" \
        --run "temperature=$VAL_TEMPERATURE" --run "top_p=$VAL_TOP_P"
}
