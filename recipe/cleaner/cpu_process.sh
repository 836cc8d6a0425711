#!/usr/bin/env bash
# The processes of a run on a CPU-only machine, for train_cpu.sh and eval/eval_cpu.sh (sourced, after launch.sh):
# the environment verl's `cpu` platform needs (the verl-cpu plugin, inherited by Ray's workers), a code-judge
# on a free port unless JUDGE_URL is given, each verl run in its own process group with a Ray temp dir of its
# own, and an exit trap that stops everything started here (the run's process group, its Ray cluster, the judge).
#   RAY_NUM_CPUS  the CPUs Ray hands out (default 2; config/platform/cpu.yaml reads it)

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    echo "cpu_process.sh is a library: source it from a CPU entry point" >&2
    exit 2
fi

export RAY_NUM_CPUS="${RAY_NUM_CPUS:-2}"
export VERL_PLATFORM=cpu
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-verl_cpu.plugin}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Ray sets OMP_NUM_THREADS to an actor's CPU share (1 for a fractional share) unless it is set: the trainer
# worker would then compute on one core.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$RAY_NUM_CPUS}"
# Ray starts its workers at nice 15, and here the workers do all the work (training, generation): on a machine
# with anything else running they would get a few percent of a core. The run's own processes are all it has.
export RAY_worker_niceness="${RAY_worker_niceness:-0}"
export PATH="$CLEANER_ROOT/.venv/bin:$PATH"

CPU_JUDGE_PID=""
CPU_RUN_PID=""
CPU_RAY_TMP=""

# Stop a process group: TERM, then KILL if anything of it is left after 20 s; returns once the group is gone.
cpu_stop_group() {
    local group="$1"
    kill -TERM -- "-$group" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        kill -0 -- "-$group" 2>/dev/null || return 0
        sleep 0.2
    done
    kill -KILL -- "-$group" 2>/dev/null || true
}

# Stop the current run's process group and the Ray cluster of its temp dir.
cpu_stop_run() {
    if [[ -n "$CPU_RUN_PID" ]]; then
        cpu_stop_group "$CPU_RUN_PID"
    fi
    CPU_RUN_PID=""
    if [[ -n "$CPU_RAY_TMP" ]]; then
        # verl stops its Ray cluster on a normal exit; after a failure, stop the one started in this temp dir.
        "$PYTHON" -m verl_cpu.ray_cleanup "$CPU_RAY_TMP" || true
        rm -rf "$CPU_RAY_TMP"
    fi
    CPU_RAY_TMP=""
}

cpu_process_cleanup() {
    local status=$?
    cpu_stop_run
    if [[ -n "$CPU_JUDGE_PID" ]]; then
        cpu_stop_group "$CPU_JUDGE_PID" # the judge and what it started (workers, redis, resource trackers)
        wait "$CPU_JUDGE_PID" 2>/dev/null || true
    fi
    exit "$status"
}
trap cpu_process_cleanup EXIT
trap 'exit 130' INT TERM

# A code-judge on a free port, its log in LOG_DIR, unless JUDGE_URL is set; the run's reward and tool read JUDGE_URL.
cpu_start_judge() {
    local log_dir="$1" port
    if [[ -z "${JUDGE_URL:-}" ]]; then
        mkdir -p "$log_dir"
        port="$("$PYTHON" -c 'from code_judge.local import free_port; print(free_port())')"
        set -m # a process group of its own, stopped as a whole on exit
        "$PYTHON" -m code_judge.cli serve --host 127.0.0.1 --port "$port" --workers 2 >"$log_dir/judge.log" 2>&1 &
        CPU_JUDGE_PID=$!
        set +m
        for _ in $(seq 1 150); do
            curl -fsS --max-time 2 "http://127.0.0.1:$port/ping" >/dev/null 2>&1 && break
            kill -0 "$CPU_JUDGE_PID" 2>/dev/null || break
            sleep 0.2
        done
        if ! curl -fsS --max-time 2 "http://127.0.0.1:$port/ping" >/dev/null 2>&1; then
            echo "error: the code-judge did not start (see $log_dir/judge.log; needs redis-server and bwrap: make system-packages)" >&2
            exit 1
        fi
        JUDGE_URL="http://127.0.0.1:$port"
    fi
    export JUDGE_URL
}

# Run a command (a verl run) in its own process group with a fresh Ray temp dir, so that a signal to the script
# stops it at once (bash runs a trap only after a foreground command returns); returns its exit status.
cpu_run() {
    # Ray's session dir holds unix sockets, whose paths must stay under 108 bytes: a short dir in /tmp.
    CPU_RAY_TMP="$(mktemp -d /tmp/cleaner-ray-XXXXXX)"
    export CLEANER_RAY_TMP="$CPU_RAY_TMP"
    local status=0
    set -m
    "$@" &
    CPU_RUN_PID=$!
    set +m
    wait "$CPU_RUN_PID" || status=$?
    cpu_stop_run
    return "$status"
}
