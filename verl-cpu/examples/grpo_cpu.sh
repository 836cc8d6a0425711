#!/usr/bin/env bash
# Stock verl GRPO on a CPU-only machine: verl's own trainer, its single-turn agent loop and a function reward,
# with the verl-cpu package's `cpu` platform and `cpu` rollout backend. Nothing else is added to verl.
#
#   MODEL_PATH=/path/to/hf-model OUT_DIR=/tmp/grpo-cpu verl-cpu/examples/grpo_cpu.sh [hydra overrides...]
#
# Writes the data set (arithmetic_data.py) to $OUT_DIR/data, trains $STEPS steps, logs verl's metrics to the
# console and to $OUT_DIR/metrics.jsonl, and stops the Ray processes it started, also after a failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${MODEL_PATH:?set MODEL_PATH to a Hugging Face causal-LM directory (Qwen2-family tested)}"
: "${OUT_DIR:=/tmp/verl-cpu-grpo}"
: "${PYTHON:=python}"
: "${STEPS:=2}"
: "${BATCH:=2}"               # prompts per step
: "${ROLLOUT_N:=4}"           # samples per prompt (the GRPO group)
: "${MAX_PROMPT_LENGTH:=128}"
: "${MAX_RESPONSE_LENGTH:=64}"
: "${NUM_CPUS:=2}"            # Ray's CPUs: one trainer worker plus room for the agent-loop and reward workers
: "${ROLLOUT_DTYPE:=bfloat16}"  # float32 or bfloat16 (weights of the rollout copy; the actor keeps fp32 masters)
: "${ACTOR_DTYPE:=float32}"   # the actor's compute dtype (FSDP2 mixed precision); master weights stay fp32

export VERL_PLATFORM=cpu
# The package's entry point registers everything under VERL_PLATFORM=cpu; naming the module too makes an
# import error stop every process with its traceback (verl swallows entry-point errors).
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-verl_cpu.plugin}"
export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$OUT_DIR/metrics.jsonl}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$NUM_CPUS}"
export RAY_worker_niceness="${RAY_worker_niceness:-0}"
export TOKENIZERS_PARALLELISM=false

mkdir -p "$OUT_DIR"
RAY_TMP="$(mktemp -d /tmp/verl-cpu-ray-XXXXXX)"
trap '"$PYTHON" -m verl_cpu.ray_cleanup "$RAY_TMP" || true; rm -rf "$RAY_TMP"' EXIT
read -r TRAIN VAL < <("$PYTHON" "$HERE/arithmetic_data.py" "$OUT_DIR/data")

"$PYTHON" -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    "data.train_files=$TRAIN" \
    "data.val_files=$VAL" \
    "data.train_batch_size=$BATCH" \
    "data.max_prompt_length=$MAX_PROMPT_LENGTH" \
    "data.max_response_length=$MAX_RESPONSE_LENGTH" \
    data.dataloader_num_workers=0 \
    "actor_rollout_ref.model.path=$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=True \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.strategy=fsdp2 \
    "actor_rollout_ref.actor.ppo_mini_batch_size=$BATCH" \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))" \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.use_torch_compile=False \
    actor_rollout_ref.ref.use_torch_compile=False \
    actor_rollout_ref.actor.fsdp_config.model_dtype=fp32 \
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:$ACTOR_DTYPE,reduce_dtype:float32,buffer_dtype:float32}" \
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$((4 * (MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH)))" \
    actor_rollout_ref.rollout.name=cpu \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.mode=async \
    "actor_rollout_ref.rollout.n=$ROLLOUT_N" \
    "actor_rollout_ref.rollout.dtype=$ROLLOUT_DTYPE" \
    actor_rollout_ref.rollout.checkpoint_engine.backend=naive \
    actor_rollout_ref.rollout.agent.num_workers=1 \
    "reward.custom_reward_function.path=$HERE/arithmetic_reward.py" \
    reward.num_workers=1 \
    trainer.device=cpu \
    trainer.use_v1=False \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    "trainer.total_training_steps=$STEPS" \
    trainer.val_before_train=False \
    trainer.test_freq=-1 \
    trainer.save_freq=-1 \
    "trainer.logger=[console,file]" \
    trainer.project_name=verl-cpu \
    trainer.experiment_name=grpo-arithmetic \
    "trainer.default_local_dir=$OUT_DIR/checkpoints" \
    "+ray_kwargs.ray_init.num_cpus=$NUM_CPUS" \
    "+ray_kwargs.ray_init._temp_dir=$RAY_TMP" \
    +ray_kwargs.ray_init.include_dashboard=False \
    "$@"
