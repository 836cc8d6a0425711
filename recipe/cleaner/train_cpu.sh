#!/usr/bin/env bash
# CLEANER on a CPU-only machine (docs/train-cpu.md): verl's own trainer with GRPO + SAAR on the bundled demo
# problems, the `cpu` platform and rollout backend of the verl-cpu package; 2 training steps, a validation pass
# and a checkpoint after step 2. Everything it trains with: config/train_cpu.yaml (CLEANER-4B's recipe with the
# platform/cpu.yaml overlay). It starts a code-judge on a free port (unless JUDGE_URL is set) and stops all it
# started; output in OUTPUT_DIR (default train-cpu-output/): checkpoints, validation, metrics.jsonl, wandb/
# (offline). Arguments are Hydra overrides. Resume for one more step:
#   train_cpu.sh trainer.resume_mode=auto trainer.total_training_steps=3 trainer.save_freq=-1 trainer.test_freq=-1
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${MODEL_PATH:?set MODEL_PATH to a Hugging Face model directory (make train-cpu builds the 0.5B one)}"
: "${PYTHON:=$ROOT/.venv/bin/python}"
export MODEL_PATH OUTPUT_DIR="${OUTPUT_DIR:-$ROOT/train-cpu-output}"
# shellcheck source=recipe/cleaner/launch.sh
source "$ROOT/recipe/cleaner/launch.sh" # DRY_RUN, JUDGE_URL, the reference's override lines
# shellcheck source=recipe/cleaner/cpu_process.sh
source "$ROOT/recipe/cleaner/cpu_process.sh" # the CPU environment, the judge, the stop-everything trap
export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$OUTPUT_DIR/metrics.jsonl}"
export WANDB_MODE=offline WANDB_DIR="$OUTPUT_DIR"

if recipe_launching; then
    "$PYTHON" -m cleaner.models check "$MODEL_PATH" >/dev/null # not a model: stop before anything starts
    cpu_start_judge "$OUTPUT_DIR"
fi
if [[ -z "${TRAIN_FILES:-}" ]]; then
    read -r TRAIN_FILES VAL_FILES < <("$PYTHON" -m cleaner.data.demo_train_files "$OUTPUT_DIR/data")
fi
export TRAIN_FILES VAL_FILES="${VAL_FILES:-$TRAIN_FILES}"
# CHAT_TEMPLATE: a Jinja file replacing the model's chat template (verl's custom_chat_template takes its text);
# make train-cpu sets the python-block template that echoes the printed value. Every newline of such a template
# is whitespace its tags trim, so the text on one line renders the same and passes as one quoted Hydra value.
template=()
if [[ -n "${CHAT_TEMPLATE:-}" ]]; then
    template_text="$(<"$CHAT_TEMPLATE")"
    template=("actor_rollout_ref.model.custom_chat_template='${template_text//$'\n'/ }'")
fi

cpu_run "$PYTHON" -m verl.trainer.main_ppo --config-dir "$CLEANER_CONFIG_DIR" --config-name train_cpu \
    "${template[@]}" "$@"
