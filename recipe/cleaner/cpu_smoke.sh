#!/usr/bin/env bash
# CLEANER on a CPU-only machine: verl's own trainer (python -m verl.trainer.main_ppo) with GRPO + SAAR on the
# bundled demo problems, the `cpu` platform and the `cpu` rollout backend of the verl-cpu package (docs/train-cpu.md).
# It starts a code-judge on a free port (unless JUDGE_URL is set), writes the train/val parquet files, runs
# 2 training steps with a validation pass and a checkpoint after step 2, and stops what it started.
# Everything goes to $OUTPUT_DIR (default train-cpu-output/). Extra arguments are Hydra overrides.
# Resume for one more step: RESUME_MODE=auto TOTAL_TRAINING_STEPS=3 SAVE_FREQ=-1 TEST_FREQ=-1 cpu_smoke.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${PYTHON:=$ROOT/.venv/bin/python}"
: "${EXPERIMENT_NAME:=cpu-smoke}"
: "${OUTPUT_DIR:=$ROOT/train-cpu-output}"
: "${MODEL_PATH:?set MODEL_PATH to a Hugging Face model directory (make train-cpu builds the 0.5B one)}"
: "${RAY_NUM_CPUS:=2}"
: "${TOTAL_TRAINING_STEPS:=2}"
: "${ROLLOUT_BACKEND:=cpu}"
: "${TRAINER_USE_V1:=False}"
# Small GRPO: 2 prompts x 4 rollouts per step, short responses, few turns.
: "${TRAIN_BATCH_SIZE:=2}"
: "${ROLLOUT_N:=4}"
: "${PPO_MINI_BATCH_SIZE:=2}"
: "${MAX_PROMPT_LENGTH:=512}"
: "${MAX_RESPONSE_LENGTH:=512}"
: "${MAX_NEW_TOKENS:=128}" # per turn: one code block or a short answer
: "${MAX_TURNS:=3}"
# A Jinja chat template replacing the model's own (verl's custom_chat_template), e.g. the python-block protocol
# of make train-cpu (cleaner/resources/python_block_echo_chat_template.jinja); empty: the model's own template.
: "${CHAT_TEMPLATE:=}"
: "${TOOL_FORMAT:=cleaner_lenient}"
: "${ACTOR_LR:=1e-6}"
: "${LR_WARMUP_STEPS:=0}"
: "${ENABLE_TOOL_ROLLBACK:=True}"
: "${CALCULATE_LOG_PROBS:=False}"
: "${ROLLOUT_IS:=null}"
: "${OVERLONG_BUFFER_LEN:=128}"
: "${VAL_N:=1}"
: "${VAL_COUNT:=2}"
: "${VAL_BEFORE_TRAIN:=False}"
: "${SAVE_FREQ:=$TOTAL_TRAINING_STEPS}"
: "${TEST_FREQ:=$TOTAL_TRAINING_STEPS}"
: "${N_GPUS_PER_NODE:=1}"
: "${OFFLOAD:=False}"
: "${DTYPE:=float32}"              # the actor's compute dtype (FSDP2 mixed precision; master weights stay float32)
: "${ROLLOUT_DTYPE:=float32}"      # the rollout copy's weights: float32 or bfloat16
# LoRA (verl's own, on all linear layers) instead of full fine-tuning when > 0: make train-cpu uses it for the 0.5B
# model, whose full fine-tuning state (weights, gradients, Adam) would not fit next to the rollout in 24 GB.
: "${LORA_RANK:=0}"
: "${LORA_ALPHA:=32}"
: "${LOGGER:=[console,file]}"
: "${RESUME_MODE:=disable}" # a fresh run; `auto` resumes from the last checkpoint in $OUTPUT_DIR/checkpoints
JUDGE_URL_GIVEN="${JUDGE_URL:-}"
# shellcheck source=recipe/cleaner/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

export VERL_PLATFORM=cpu
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-verl_cpu.plugin}"
export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$OUTPUT_DIR/metrics.jsonl}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Ray sets OMP_NUM_THREADS to an actor's CPU share (1 for a fractional share) unless it is set: the trainer
# worker would then compute on one core.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$RAY_NUM_CPUS}"
# Ray starts its workers at nice 15, and here the workers do all the work (training, generation): on a machine
# with anything else running they would get a few percent of a core. The run's own processes are all it has.
export RAY_worker_niceness="${RAY_worker_niceness:-0}"
export PATH="$ROOT/.venv/bin:$PATH"

STARTED_JUDGE_PID=""
TRAIN_PID=""
# Ray's session dir holds unix sockets, whose paths must stay under 108 bytes: a short dir of its own in /tmp.
RAY_TMP="$(mktemp -d /tmp/cleaner-ray-XXXXXX)"
cpu_smoke_cleanup() {
    local status=$?
    if [[ -n "$TRAIN_PID" ]] && kill -0 "$TRAIN_PID" 2>/dev/null; then
        # The trainer runs in its own process group (set -m below): stop the driver and whatever it forked.
        kill -TERM -- "-$TRAIN_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$TRAIN_PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$TRAIN_PID" 2>/dev/null || true
    fi
    if [[ -n "$STARTED_JUDGE_PID" ]]; then
        kill "$STARTED_JUDGE_PID" 2>/dev/null || true
        wait "$STARTED_JUDGE_PID" 2>/dev/null || true
    fi
    # The trainer stops its own Ray cluster on a normal exit; after a failure, stop the one it started here.
    "$PYTHON" -m verl_cpu.ray_cleanup "$RAY_TMP" || true
    rm -rf "$RAY_TMP"
    exit "$status"
}
trap cpu_smoke_cleanup EXIT
trap 'exit 130' INT TERM

if cleaner_launching; then
    "$PYTHON" -m cleaner.models check "$MODEL_PATH" >/dev/null
    mkdir -p "$OUTPUT_DIR"
    if [[ -z "$JUDGE_URL_GIVEN" ]]; then
        judge_port="$("$PYTHON" -c 'from code_judge.local import free_port; print(free_port())')"
        JUDGE_URL="http://127.0.0.1:$judge_port"
        "$PYTHON" -m code_judge.cli serve --host 127.0.0.1 --port "$judge_port" --workers 2 \
            >"$OUTPUT_DIR/judge.log" 2>&1 &
        STARTED_JUDGE_PID=$!
        for _ in $(seq 1 150); do
            curl -fsS --max-time 2 "$JUDGE_URL/ping" >/dev/null 2>&1 && break
            kill -0 "$STARTED_JUDGE_PID" 2>/dev/null || break
            sleep 0.2
        done
        if ! curl -fsS --max-time 2 "$JUDGE_URL/ping" >/dev/null 2>&1; then
            echo "error: the code-judge did not start (see $OUTPUT_DIR/judge.log; needs redis-server and bwrap: make system-packages)" >&2
            exit 1
        fi
    fi
fi
if [[ -z "${TRAIN_FILES:-}" ]]; then
    read -r TRAIN_FILES VAL_FILES < <("$PYTHON" -m cleaner.verl.cpu.smoke_data "$OUTPUT_DIR/data" --val-count "$VAL_COUNT")
fi
: "${VAL_FILES:=$TRAIN_FILES}"
export TRAIN_FILES VAL_FILES

# verl takes the template's text. Every newline of a python-block template is whitespace that its tags trim, so
# the text on one line renders the same (tests/resources/test_echo_chat_template.py) and passes as one Hydra value.
CHAT_TEMPLATE_OVERRIDES=()
if [[ -n "$CHAT_TEMPLATE" ]]; then
    template_text="$(<"$CHAT_TEMPLATE")"
    CHAT_TEMPLATE_OVERRIDES=("actor_rollout_ref.model.custom_chat_template='${template_text//$'\n'/ }'")
fi

# Training precision: verl's FSDP engine ignores fsdp_config.dtype and, without fsdp_config.mixed_precision,
# casts parameters to bf16 for its forward and backward passes; the precision is set explicitly from DTYPE
# (float32 masters either way). ROLLOUT_DTYPE is the dtype of the rollout server's copy of the weights.
# In the background, in its own process group, so that a signal to this script stops the run at once (bash
# would run the trap only after a foreground command returns).
set -m
cleaner_train tools \
    "actor_rollout_ref.rollout.name=$ROLLOUT_BACKEND" \
    actor_rollout_ref.rollout.checkpoint_engine.backend=naive \
    "actor_rollout_ref.rollout.dtype=$ROLLOUT_DTYPE" \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.agent.num_workers=1 \
    "+actor_rollout_ref.rollout.engine_kwargs.cpu.max_new_tokens=$MAX_NEW_TOKENS" \
    "${CHAT_TEMPLATE_OVERRIDES[@]}" \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    "actor_rollout_ref.model.lora_rank=$LORA_RANK" \
    "actor_rollout_ref.model.lora_alpha=$LORA_ALPHA" \
    actor_rollout_ref.model.lora.merge=True \
    actor_rollout_ref.actor.use_torch_compile=False \
    actor_rollout_ref.ref.use_torch_compile=False \
    actor_rollout_ref.actor.fsdp_config.model_dtype=fp32 \
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:$DTYPE,reduce_dtype:float32,buffer_dtype:float32}" \
    reward.num_workers=1 \
    data.dataloader_num_workers=0 \
    trainer.device=cpu \
    "trainer.use_v1=$TRAINER_USE_V1" \
    "trainer.total_training_steps=$TOTAL_TRAINING_STEPS" \
    "trainer.val_before_train=$VAL_BEFORE_TRAIN" \
    "trainer.resume_mode=$RESUME_MODE" \
    trainer.log_val_generations=0 \
    "+ray_kwargs.ray_init.num_cpus=$RAY_NUM_CPUS" \
    "+ray_kwargs.ray_init._temp_dir=$RAY_TMP" \
    +ray_kwargs.ray_init.include_dashboard=False \
    "$@" &
TRAIN_PID=$!
wait "$TRAIN_PID"
