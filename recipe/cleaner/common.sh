#!/usr/bin/env bash
# Shared part of every CLEANER recipe: settings from the environment, the verl command line, the preflight
# checks and the DRY_RUN mode. Recipes set their defaults (`: "${VAR:=value}"`), source this file, and call
# `cleaner_train MODE "$@"` (training) or `cleaner_validate BENCHMARK "$@"` (validation-only evaluation).
# Extra arguments are Hydra overrides and are appended last, so they win.

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    echo "common.sh is a library: source it from a recipe" >&2
    exit 2
fi

CLEANER_ROOT="${CLEANER_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
export CLEANER_ROOT

# ---------------------------------------------------------------- paths, cluster, logging
: "${PYTHON:=python3}"
: "${DATA_DIR:=$CLEANER_ROOT/dataset/prepared}"
: "${MODEL_DIR:=$CLEANER_ROOT/pretrained_models}"
: "${OUTPUT_ROOT:=$CLEANER_ROOT/output}"
: "${N_GPUS_PER_NODE:=4}"
: "${NNODES:=1}"
: "${WANDB_PROJECT:=CLEANER}"
: "${LOGGER:=[console,wandb]}"
: "${JUDGE_URL:=http://127.0.0.1:8088}"

# ---------------------------------------------------------------- the paper's hyperparameters (shared)
: "${TRAIN_BATCH_SIZE:=128}"
: "${ROLLOUT_N:=16}"
: "${PPO_MINI_BATCH_SIZE:=32}"
: "${MAX_PROMPT_LENGTH:=2560}"
: "${MAX_RESPONSE_LENGTH:=20480}"
: "${MAX_TURNS:=16}"
: "${TOOL_FORMAT:=hermes}" # verl ToolParser name; cleaner_lenient also accepts malformed calls (docs/tool.md)
: "${CLIP_RATIO_LOW:=0.2}"
: "${CLIP_RATIO_HIGH:=0.28}"
: "${CLIP_RATIO_C:=10.0}"
: "${LR_WARMUP_STEPS:=20}"
: "${OVERLONG_BUFFER_LEN:=4096}"
: "${OVERLONG_PENALTY_FACTOR:=1.0}"
: "${TOTAL_EPOCHS:=1}"
: "${SAVE_FREQ:=10}"
: "${TEST_FREQ:=10}"
: "${ROLLOUT_TP:=1}"
: "${OFFLOAD:=True}"
: "${DTYPE:=float16}"
# Recompute activations in the backward pass: what lets long (20k-token) responses fit in GPU memory.
: "${GRADIENT_CHECKPOINTING:=True}"
# Validation sampling (the paper's protocol: temperature 1.0, top_p 0.6).
: "${VAL_N:=16}"
: "${VAL_TEMPERATURE:=1.0}"
: "${VAL_TOP_P:=0.6}"

# ---------------------------------------------------------------- SAAR (actor_rollout_ref.rollout.multi_turn)
# Each SAAR variable is passed as `+actor_rollout_ref.rollout.multi_turn.<key>` only when it is set (by a recipe or
# the environment); unset, the key keeps cleaner.saar.config.SaarConfig's default, the one source of SAAR
# defaults. Variable -> key (meanings: docs/saar.md):
CLEANER_SAAR_VARIABLES=(
    ENABLE_TOOL_ROLLBACK:enable_tool_rollback
    MAX_TOOL_RETRIES:max_tool_retries
    ROLLBACK_PROBABILITY:rollback_probability
    ROLLBACK_SIMILARITY_THRESHOLD:rollback_similarity_threshold
    ROLLBACK_SIMILARITY:rollback_similarity
    ROLLBACK_IN_VALIDATION:rollback_in_validation
    ROLLBACK_ON_ERRORS:rollback_on_errors # e.g. "[exception,syntax_error]"
    ROLLBACK_SEED:rollback_seed
    ROLLBACK_EXHAUSTED_KEEP:rollback_exhausted_keep
    DROP_INFRA_ERROR_TRAJECTORIES:drop_infra_error_trajectories
    ROLLBACK_IS_THRESHOLD:rollback_is_threshold # Plan B: IS-gated rollback (append below it, replace at or above)
    ROLLBACK_IS_MEASURE:rollback_is_measure # score every splice, always replace
    ROLLBACK_IS_CORRECTION:rollback_is_correction # Plan C: replace, token-level rollout IS on spliced tokens
    ROLLBACK_AFTER_ERRORS:rollback_after_errors # 2: a position's first failure stays (one-tolerance)
)
# The recipes' deliberate differences from SaarConfig's defaults (docs/recipes.md, "Recipe defaults"):
# a trajectory the judge failed on (outage, queue timeout) says nothing about the model: mask it out of the loss,
# in every tool recipe, baselines included, so CLEANER and its baseline train on the same trajectories;
: "${DROP_INFRA_ERROR_TRAJECTORIES:=True}"
# and a training run's validation passes use SAAR when its training does.
: "${ROLLBACK_IN_VALIDATION:=${ENABLE_TOOL_ROLLBACK:-False}}"

# Log-prob handling differs between CLEANER (recomputed on the purified sequence) and the baselines
# (rollout log-probs + sequence-level importance sampling). SAAR splices tokens sampled in another context, so
# with it on the defaults are CLEANER's; rollout IS together with SAAR is refused (cleaner/verl/config_checks.py),
# except token-level IS with ROLLBACK_IS_CORRECTION=True (Plan C), which then is the default.
if [[ "${ENABLE_TOOL_ROLLBACK:-False}" == "True" && "${ROLLBACK_IS_CORRECTION:-False}" == "True" ]]; then
    : "${CALCULATE_LOG_PROBS:=True}"
    : "${ROLLOUT_IS:=token}"
elif [[ "${ENABLE_TOOL_ROLLBACK:-False}" == "True" ]]; then
    : "${CALCULATE_LOG_PROBS:=False}"
    : "${ROLLOUT_IS:=null}"
else
    : "${CALCULATE_LOG_PROBS:=True}"
    : "${ROLLOUT_IS:=sequence}" # or null
fi
: "${GPU_MEMORY_UTILIZATION:=0.65}"

CLEANER_TOOL_CONFIG="$CLEANER_ROOT/recipe/cleaner/config/python_tool.yaml"
CLEANER_AGENT_LOOP_CONFIG="$CLEANER_ROOT/recipe/cleaner/config/agent_loop.yaml"
CLEANER_REWARD_PATH="$CLEANER_ROOT/cleaner/rewards/__init__.py"
CLEANER_DEFAULT_JUDGE_URL="http://127.0.0.1:8088"
# Logs the rollback/* and tool_calls/* step metrics and checks the agent loop is registered on every worker.
CLEANER_AGENT_LOOP_MANAGER="cleaner.verl.agent_loop_manager.CleanerAgentLoopManager"
CLEANER_MULTI_TURN_CONFIG="cleaner.verl.multi_turn_config.SaarMultiTurnConfig"

# "a b" -> "['a','b']" (a Hydra list of paths).
cleaner_hydra_list() {
    local out="" item
    for item in "$@"; do
        out+="${out:+,}'$item'"
    done
    printf '[%s]' "$out"
}

# The tool yaml names the judge; a different JUDGE_URL gets a copy of it with that URL, in OUTPUT_DIR
# (written by cleaner_run, once the run goes ahead).
cleaner_tool_config() {
    if [[ "$JUDGE_URL" == "$CLEANER_DEFAULT_JUDGE_URL" ]]; then
        printf '%s' "$CLEANER_TOOL_CONFIG"
    else
        printf '%s' "$OUTPUT_DIR/python_tool.yaml"
    fi
}

cleaner_write_tool_config() {
    if [[ "$JUDGE_URL" != "$CLEANER_DEFAULT_JUDGE_URL" ]]; then
        "$PYTHON" "$CLEANER_ROOT/recipe/cleaner/compose_config.py" --write-tool-config \
            "$CLEANER_TOOL_CONFIG" "$(cleaner_tool_config)" "$JUDGE_URL" >/dev/null
    fi
}

# Sets CLEANER_OVERRIDES: everything but the data files. MODE is `tools` (our agent loop, tool and SAAR
# knobs) or `notool` (single-turn generation, no tool config).
cleaner_overrides() {
    local mode="$1"
    local max_token_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))
    CLEANER_OVERRIDES=(
        algorithm.adv_estimator=grpo
        algorithm.norm_adv_by_std_in_grpo=True
        algorithm.use_kl_in_reward=False
        algorithm.kl_ctrl.kl_coef=0.0
        "data.train_batch_size=$TRAIN_BATCH_SIZE"
        "data.max_prompt_length=$MAX_PROMPT_LENGTH"
        "data.max_response_length=$MAX_RESPONSE_LENGTH"
        data.prompt_key=prompt
        data.return_raw_chat=True
        data.filter_overlong_prompts=True
        data.truncation=error
        "actor_rollout_ref.model.path=$MODEL_PATH"
        actor_rollout_ref.model.use_remove_padding=True
        "actor_rollout_ref.model.enable_gradient_checkpointing=$GRADIENT_CHECKPOINTING"
        actor_rollout_ref.actor.strategy=fsdp2
        actor_rollout_ref.actor.use_kl_loss=False
        actor_rollout_ref.actor.kl_loss_coef=0.0
        actor_rollout_ref.actor.entropy_coeff=0
        "actor_rollout_ref.actor.clip_ratio_low=$CLIP_RATIO_LOW"
        "actor_rollout_ref.actor.clip_ratio_high=$CLIP_RATIO_HIGH"
        "actor_rollout_ref.actor.clip_ratio_c=$CLIP_RATIO_C"
        actor_rollout_ref.actor.grad_clip=1.0
        actor_rollout_ref.actor.loss_agg_mode=token-mean
        "actor_rollout_ref.actor.optim.lr=$ACTOR_LR"
        "actor_rollout_ref.actor.optim.lr_warmup_steps=$LR_WARMUP_STEPS"
        actor_rollout_ref.actor.use_dynamic_bsz=True
        "actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE"
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$max_token_len"
        "actor_rollout_ref.actor.fsdp_config.param_offload=$OFFLOAD"
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=$OFFLOAD"
        "actor_rollout_ref.actor.fsdp_config.dtype=$DTYPE"
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$((max_token_len * 4))"
        actor_rollout_ref.rollout.name=sglang
        actor_rollout_ref.rollout.mode=async
        "actor_rollout_ref.rollout.dtype=$DTYPE"
        "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
        "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEMORY_UTILIZATION"
        "actor_rollout_ref.rollout.n=$ROLLOUT_N"
        "actor_rollout_ref.rollout.calculate_log_probs=$CALCULATE_LOG_PROBS"
        "actor_rollout_ref.rollout.val_kwargs.n=$VAL_N"
        "actor_rollout_ref.rollout.val_kwargs.temperature=$VAL_TEMPERATURE"
        "actor_rollout_ref.rollout.val_kwargs.top_p=$VAL_TOP_P"
        actor_rollout_ref.rollout.val_kwargs.do_sample=True
        "algorithm.rollout_correction.rollout_is=$ROLLOUT_IS"
        # verl's DAPO manager (overlong buffer) plus the agent loop's saar_* statistics in the reward's extra_info
        reward.reward_manager.source=importlib
        reward.reward_manager.name=CleanerDAPORewardManager
        reward.reward_manager.module.path=pkg://cleaner.verl.reward_manager
        "reward.custom_reward_function.path=$CLEANER_REWARD_PATH"
        reward.custom_reward_function.name=compute_score
        "+reward.custom_reward_function.reward_kwargs.judge_url=$JUDGE_URL"
        +reward.reward_kwargs.overlong_buffer_cfg.enable=True
        "+reward.reward_kwargs.overlong_buffer_cfg.len=$OVERLONG_BUFFER_LEN"
        "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=$OVERLONG_PENALTY_FACTOR"
        +reward.reward_kwargs.overlong_buffer_cfg.log=False
        "+reward.reward_kwargs.max_resp_len=$MAX_RESPONSE_LENGTH"
        "trainer.logger=$LOGGER"
        "trainer.project_name=$WANDB_PROJECT"
        "trainer.experiment_name=$EXPERIMENT_NAME"
        "trainer.n_gpus_per_node=$N_GPUS_PER_NODE"
        "trainer.nnodes=$NNODES"
        "trainer.default_local_dir=$OUTPUT_DIR/checkpoints"
        "trainer.validation_data_dir=$OUTPUT_DIR/validation"
        "trainer.save_freq=$SAVE_FREQ"
        "trainer.test_freq=$TEST_FREQ"
        "trainer.total_epochs=$TOTAL_EPOCHS"
        trainer.val_before_train=True
        trainer.log_val_generations=20
    )
    case "$mode" in
        tools)
            CLEANER_OVERRIDES+=(
                actor_rollout_ref.rollout.multi_turn.enable=True
                "actor_rollout_ref.rollout.multi_turn.format=$TOOL_FORMAT"
                "actor_rollout_ref.rollout.multi_turn.max_user_turns=$MAX_TURNS"
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=$MAX_TURNS"
                "actor_rollout_ref.rollout.multi_turn.tool_config_path=$(cleaner_tool_config)"
                "actor_rollout_ref.rollout.agent.agent_loop_config_path=$CLEANER_AGENT_LOOP_CONFIG"
                # verl turns multi_turn into its MultiTurnConfig dataclass, which rejects the SAAR keys below;
                # the plugin's subclass declares them.
                "actor_rollout_ref.rollout.multi_turn._target_=$CLEANER_MULTI_TURN_CONFIG"
                # In RolloutConfig but not in verl's rollout.yaml, hence the `+`.
                "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=$CLEANER_AGENT_LOOP_MANAGER"
            )
            local entry variable
            for entry in "${CLEANER_SAAR_VARIABLES[@]}"; do
                variable="${entry%%:*}"
                if [[ -n "${!variable:-}" ]]; then
                    CLEANER_OVERRIDES+=("+actor_rollout_ref.rollout.multi_turn.${entry#*:}=${!variable}")
                fi
            done
            ;;
        notool)
            CLEANER_OVERRIDES+=(actor_rollout_ref.rollout.multi_turn.enable=False)
            ;;
        *)
            echo "cleaner_overrides: unknown mode '$mode' (tools or notool)" >&2
            return 2
            ;;
    esac
}

# Prints every problem that would stop a run (nothing when ready). Arguments: the data files.
cleaner_preflight_problems() {
    local file
    if [[ ! -f "$MODEL_PATH/config.json" ]]; then
        echo "model: $MODEL_PATH has no config.json (set MODEL_PATH to a Hugging Face model directory)"
    fi
    for file in "$@"; do
        [[ -f "$file" ]] || echo "data: $file does not exist (see dataset/README.md; recipe/cleaner/prepare_data.sh builds it)"
    done
    if ! curl -fsS --max-time 5 "$JUDGE_URL/ping" >/dev/null 2>&1; then
        echo "judge: no answer from $JUDGE_URL/ping (start it: code-judge serve --host 0.0.0.0 --port 8088)"
    fi
}

# Sets CLEANER_USER_OVERRIDES: the extra arguments, rewritten so that the reference implementation's lines work
# here (compose_config.py --translate: legacy reward keys become the keys verl 0.9.1 reads; `+key=` for a key
# the recipe already sets becomes `++key=`). Each rewrite is noted on stderr.
cleaner_user_overrides() {
    CLEANER_USER_OVERRIDES=()
    [[ $# -gt 0 ]] || return 0
    local translated
    translated="$("$PYTHON" "$CLEANER_ROOT/recipe/cleaner/compose_config.py" --translate "${CLEANER_OVERRIDES[@]}" -- "$@")" || return
    [[ -n "$translated" ]] && mapfile -t CLEANER_USER_OVERRIDES <<<"$translated"
    return 0
}

# Runs `python -m verl.trainer.main_ppo` with the overrides in CLEANER_OVERRIDES followed by "$@", after the
# preflight checks (model, data files, judge, then the composed config and the data's agent loop). Arguments
# before `--` are the data files to check. DRY_RUN=1 composes and validates the config instead; PRINT_COMMAND=1
# prints the command, one argument per line, and a blank line. PREFLIGHT_ONLY=1 stops after the checks.
cleaner_run() {
    local files=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do
        files+=("$1")
        shift
    done
    shift
    cleaner_user_overrides "$@" || return
    local overrides=("${CLEANER_OVERRIDES[@]}" "${CLEANER_USER_OVERRIDES[@]}")
    if [[ "${PRINT_COMMAND:-0}" == "1" ]]; then
        cleaner_write_tool_config
        printf '%s\n' "$PYTHON" -m verl.trainer.main_ppo "${overrides[@]}"
        echo
        return 0
    fi
    local problems
    problems="$(cleaner_preflight_problems "${files[@]}")"
    if [[ "${DRY_RUN:-0}" == "1" ]]; then
        if [[ -n "$problems" ]]; then
            printf 'DRY_RUN: a real run would stop here:\n%s\n' "$problems" >&2
        fi
        cleaner_write_tool_config
        "$PYTHON" "$CLEANER_ROOT/recipe/cleaner/compose_config.py" "${overrides[@]}"
        return
    fi
    if [[ -z "$problems" ]]; then
        cleaner_write_tool_config
        problems="$("$PYTHON" "$CLEANER_ROOT/recipe/cleaner/compose_config.py" --preflight "${overrides[@]}")" || return
    fi
    if [[ -n "$problems" ]]; then
        printf 'cannot start %s:\n%s\n' "$EXPERIMENT_NAME" "$problems" >&2
        return 1
    fi
    if [[ "${PREFLIGHT_ONLY:-0}" == "1" ]]; then
        echo "preflight ok: $EXPERIMENT_NAME"
        return 0
    fi
    mkdir -p "$OUTPUT_DIR"
    "$PYTHON" -m verl.trainer.main_ppo "${overrides[@]}"
}

# True when this invocation really launches jobs (not DRY_RUN, PRINT_COMMAND or PREFLIGHT_ONLY).
cleaner_launching() {
    [[ "${DRY_RUN:-0}" != "1" && "${PRINT_COMMAND:-0}" != "1" && "${PREFLIGHT_ONLY:-0}" != "1" ]]
}

# Training. MODE: tools | notool. Uses TRAIN_FILES and VAL_FILES (space-separated paths).
cleaner_train() {
    local mode="$1"
    shift
    : "${OUTPUT_DIR:=$OUTPUT_ROOT/$EXPERIMENT_NAME}"
    : "${TRAIN_FILES:?set TRAIN_FILES (space-separated parquet files)}"
    : "${VAL_FILES:?set VAL_FILES (space-separated parquet files)}"
    cleaner_overrides "$mode" || return
    local train_files val_files
    read -r -a train_files <<<"$TRAIN_FILES"
    read -r -a val_files <<<"$VAL_FILES"
    CLEANER_OVERRIDES+=(
        "data.train_files=$(cleaner_hydra_list "${train_files[@]}")"
        "data.val_files=$(cleaner_hydra_list "${val_files[@]}")"
    )
    cleaner_run "${train_files[@]}" "${val_files[@]}" -- "$@"
}

# Validation-only evaluation of one prepared benchmark file: verl's `trainer.val_only=True` runs the
# validation pass and returns before any training step; generations go to $OUTPUT_DIR/generations/NAME.
cleaner_validate() {
    local mode="$1" name="$2" file="$3"
    shift 3
    cleaner_overrides "$mode" || return
    CLEANER_OVERRIDES+=(
        "data.train_files=$(cleaner_hydra_list "$file")"
        "data.val_files=$(cleaner_hydra_list "$file")"
        trainer.val_only=True
        trainer.val_before_train=True
        # The benchmark doubles as the (never used) train set; it can be smaller than one batch, which
        # would make verl size the LR schedule for zero steps.
        trainer.total_training_steps=1
        "trainer.validation_data_dir=$OUTPUT_DIR/generations/$name"
        "trainer.logger=[console]"
    )
    cleaner_run "$file" -- "$@"
}
