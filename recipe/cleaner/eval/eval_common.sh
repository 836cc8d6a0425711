#!/usr/bin/env bash
# Shared part of the evaluation scripts (sourced): one validation-only verl run per benchmark
# (config/eval_tools.yaml or eval_notool.yaml), then the results table.
#   MODEL_PATH=...      the model to evaluate (Hugging Face directory)
#   TEST_TIME_SAAR      off | on (tool models; config/test_time_saar/)
#   MODE                tools | notool
#   PLATFORM            gpu | cpu (verl's `cpu` platform with the verl-cpu package: config/platform/cpu.yaml and
#                       cpu_process.sh, docs/evaluation.md)
#   VAL_N, BENCHMARKS, DATA_DIR, OUTPUT_ROOT or OUTPUT_DIR, EXPERIMENT_NAME
# Extra arguments are Hydra overrides for every run (they win).

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    echo "eval_common.sh is a library: source it from an evaluation script" >&2
    exit 2
fi

: "${MODE:=tools}"
: "${TEST_TIME_SAAR:=off}"
: "${PLATFORM:=gpu}"
: "${MODEL_PATH:?set MODEL_PATH to the model directory (Hugging Face format) to evaluate}"
case "$TEST_TIME_SAAR" in
    on | off) ;;
    *)
        echo "TEST_TIME_SAAR must be on or off, not '$TEST_TIME_SAAR'" >&2
        exit 2
        ;;
esac
# shellcheck source=recipe/cleaner/launch.sh
source "$(dirname "${BASH_SOURCE[0]}")/../launch.sh"
case "$PLATFORM" in
    gpu) CLEANER_EVAL_PLATFORM=() ;;
    cpu)
        # shellcheck source=recipe/cleaner/cpu_process.sh
        source "$(dirname "${BASH_SOURCE[0]}")/../cpu_process.sh"
        CLEANER_EVAL_PLATFORM=(+platform=cpu)
        ;;
    *)
        echo "PLATFORM must be gpu or cpu, not '$PLATFORM'" >&2
        exit 2
        ;;
esac
: "${EXPERIMENT_NAME:=eval-$(basename "$MODEL_PATH")-saar-$TEST_TIME_SAAR}"
: "${OUTPUT_DIR:=$OUTPUT_ROOT/$EXPERIMENT_NAME}"
if [[ "$PLATFORM" == "cpu" ]] && recipe_launching; then
    "$PYTHON" -m cleaner.models check "$MODEL_PATH" >/dev/null # not a model: stop before anything starts
    cpu_start_judge "$OUTPUT_DIR"
fi

# The prepared file of a benchmark (no-tool models get the prompts without tool hints).
cleaner_eval_file() {
    if [[ "$MODE" == "notool" ]]; then
        printf '%s/%s.notool.parquet' "$DATA_DIR" "$1"
    else
        printf '%s/%s.parquet' "$DATA_DIR" "$1"
    fi
}

# One verl validation-only run of benchmark NAME; generations go to $OUTPUT_DIR/generations/NAME.
cleaner_eval_run() {
    local name="$1" file
    shift
    file="$(cleaner_eval_file "$name")"
    local command=(
        "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name "eval_$MODE"
        "${CLEANER_EVAL_PLATFORM[@]}"
        "actor_rollout_ref.model.path=$MODEL_PATH"
        "data.train_files=['$file']"
        "data.val_files=['$file']"
        "actor_rollout_ref.rollout.val_kwargs.n=$VAL_N"
        "trainer.experiment_name=$EXPERIMENT_NAME"
        "trainer.default_local_dir=$OUTPUT_DIR/checkpoints"
        "trainer.validation_data_dir=$OUTPUT_DIR/generations/$name"
    )
    if [[ "$MODE" == "tools" ]]; then
        command+=("test_time_saar=$TEST_TIME_SAAR")
    fi
    if [[ "$PLATFORM" == "cpu" ]]; then
        cpu_run "${command[@]}" "$@"
    else
        "${command[@]}" "$@"
    fi
}

cleaner_eval_benchmarks() {
    local bench generations=() sampling=() sampling_text
    for bench in $BENCHMARKS; do
        cleaner_eval_run "$bench" "$@"
        generations+=(--generations "$bench=$OUTPUT_DIR/generations/$bench")
    done
    recipe_launching || return 0
    # The validation sampling the runs used, read from their config (paper_grpo.yaml's val_kwargs, overrides applied).
    sampling_text="$("$PYTHON" -m cleaner.recipes.config_values "$CLEANER_CONFIG_DIR" "eval_$MODE" \
        actor_rollout_ref.rollout.val_kwargs.temperature actor_rollout_ref.rollout.val_kwargs.top_p \
        -- "${CLEANER_EVAL_PLATFORM[@]}" "actor_rollout_ref.model.path=$MODEL_PATH" "$@")"
    mapfile -t sampling <<<"$sampling_text"
    "$PYTHON" -m cleaner.cli eval score "${generations[@]}" --output-dir "$OUTPUT_DIR" \
        --run "model=$MODEL_PATH" --run "mode=$MODE" --run "test_time_saar=$TEST_TIME_SAAR" --run "n=$VAL_N" \
        "${sampling[@]/#/--run=}"
}
