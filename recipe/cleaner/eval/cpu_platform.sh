#!/usr/bin/env bash
# The `cpu` platform of the evaluation scripts (sourced by eval_common.sh when PLATFORM=cpu, before common.sh):
# verl's validation-only run on the `cpu` platform with the `cpu` rollout backend of the verl-cpu package,
# switched on the way recipe/cleaner/cpu_smoke.sh switches training (docs/train-cpu.md): the plugin module and
# VERL_PLATFORM in the environment Ray's workers inherit, CPU overrides before the user's, a Ray temp dir of its
# own, each run in its own process group, and a code-judge on a free port unless JUDGE_URL is given. Everything
# started is stopped.

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    echo "cpu_platform.sh is a library: eval_common.sh sources it for PLATFORM=cpu" >&2
    exit 2
fi

CLEANER_EVAL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
: "${PYTHON:=$CLEANER_EVAL_ROOT/.venv/bin/python}"
: "${OUTPUT_ROOT:=$CLEANER_EVAL_ROOT/eval-cpu-output}"
: "${RAY_NUM_CPUS:=2}"
: "${ROLLOUT_BACKEND:=cpu}"
: "${TRAINER_USE_V1:=False}"
: "${N_GPUS_PER_NODE:=1}"
: "${OFFLOAD:=False}"
: "${DTYPE:=float32}"
# Short turns on a CPU: one code block or a short answer per turn, 3 turns (a failed call, its retry, the answer).
: "${MAX_NEW_TOKENS:=128}"
: "${MAX_TURNS:=3}"
: "${TOOL_FORMAT:=cleaner_lenient}"
# The prompts with the tool schema are about 500 tokens; verl drops longer prompts, so leave room.
: "${MAX_PROMPT_LENGTH:=1024}"
: "${MAX_RESPONSE_LENGTH:=1024}"
# verl's DAPO reward manager refuses an overlong buffer longer than the responses (the recipes' 4096).
: "${OVERLONG_BUFFER_LEN:=128}"
CLEANER_EVAL_JUDGE_GIVEN="${JUDGE_URL:-}"

export VERL_PLATFORM=cpu
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-verl_cpu.plugin}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Ray would set OMP_NUM_THREADS to a worker's CPU share (1 for a fractional share); its workers do all the work
# here, at nice 0 rather than Ray's 15.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$RAY_NUM_CPUS}"
export RAY_worker_niceness="${RAY_worker_niceness:-0}"
export PATH="$CLEANER_EVAL_ROOT/.venv/bin:$PATH"

CLEANER_EVAL_JUDGE_PID=""
CLEANER_EVAL_RUN_PID=""
CLEANER_EVAL_RAY_TMP=""

cleaner_eval_cpu_cleanup() {
    local status=$?
    if [[ -n "$CLEANER_EVAL_RUN_PID" ]] && kill -0 "$CLEANER_EVAL_RUN_PID" 2>/dev/null; then
        kill -TERM -- "-$CLEANER_EVAL_RUN_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$CLEANER_EVAL_RUN_PID" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$CLEANER_EVAL_RUN_PID" 2>/dev/null || true
    fi
    if [[ -n "$CLEANER_EVAL_JUDGE_PID" ]]; then
        kill "$CLEANER_EVAL_JUDGE_PID" 2>/dev/null || true
        wait "$CLEANER_EVAL_JUDGE_PID" 2>/dev/null || true
    fi
    if [[ -n "$CLEANER_EVAL_RAY_TMP" ]]; then
        # verl stops its Ray cluster on a normal exit; after a failure, stop the one started in this temp dir.
        "$PYTHON" -m verl_cpu.ray_cleanup "$CLEANER_EVAL_RAY_TMP" || true
        rm -rf "$CLEANER_EVAL_RAY_TMP"
    fi
    exit "$status"
}

# After common.sh: the Ray temp dir, the exit trap and (unless JUDGE_URL was given) a code-judge.
cleaner_eval_cpu_start() {
    # Ray's session dir holds unix sockets, whose paths must stay under 108 bytes: a short dir in /tmp.
    CLEANER_EVAL_RAY_TMP="$(mktemp -d /tmp/cleaner-ray-XXXXXX)"
    trap cleaner_eval_cpu_cleanup EXIT
    trap 'exit 130' INT TERM
    cleaner_launching || return 0
    # A directory that is not a model stops the script before anything starts.
    "$PYTHON" -m cleaner.models check "$MODEL_PATH" >/dev/null
    [[ -z "$CLEANER_EVAL_JUDGE_GIVEN" ]] || return 0
    mkdir -p "$OUTPUT_DIR"
    local port
    port="$("$PYTHON" -c 'from code_judge.local import free_port; print(free_port())')"
    JUDGE_URL="http://127.0.0.1:$port"
    "$PYTHON" -m code_judge.cli serve --host 127.0.0.1 --port "$port" --workers 2 >"$OUTPUT_DIR/judge.log" 2>&1 &
    CLEANER_EVAL_JUDGE_PID=$!
    for _ in $(seq 1 150); do
        curl -fsS --max-time 2 "$JUDGE_URL/ping" >/dev/null 2>&1 && return 0
        kill -0 "$CLEANER_EVAL_JUDGE_PID" 2>/dev/null || break
        sleep 0.2
    done
    echo "error: the code-judge did not start (see $OUTPUT_DIR/judge.log; needs redis-server and bwrap: make system-packages)" >&2
    exit 1
}

# cleaner_validate with the CPU overrides (before the user's, which win), in its own process group so that a
# signal to the script stops the run at once (bash runs a trap only after a foreground command returns).
cleaner_eval_cpu_validate() {
    local mode="$1" name="$2" file="$3"
    shift 3
    set -m
    cleaner_validate "$mode" "$name" "$file" \
        "actor_rollout_ref.rollout.name=$ROLLOUT_BACKEND" \
        actor_rollout_ref.rollout.checkpoint_engine.backend=naive \
        actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
        actor_rollout_ref.rollout.agent.num_workers=1 \
        "+actor_rollout_ref.rollout.engine_kwargs.cpu.max_new_tokens=$MAX_NEW_TOKENS" \
        +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
        actor_rollout_ref.actor.use_torch_compile=False \
        actor_rollout_ref.ref.use_torch_compile=False \
        actor_rollout_ref.actor.fsdp_config.model_dtype=fp32 \
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:$DTYPE,reduce_dtype:float32,buffer_dtype:float32}" \
        reward.num_workers=1 \
        data.dataloader_num_workers=0 \
        trainer.device=cpu \
        "trainer.use_v1=$TRAINER_USE_V1" \
        "+ray_kwargs.ray_init.num_cpus=$RAY_NUM_CPUS" \
        "+ray_kwargs.ray_init._temp_dir=$CLEANER_EVAL_RAY_TMP" \
        +ray_kwargs.ray_init.include_dashboard=False \
        "$@" &
    CLEANER_EVAL_RUN_PID=$!
    set +m
    wait "$CLEANER_EVAL_RUN_PID"
}
