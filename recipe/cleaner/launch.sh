#!/usr/bin/env bash
# Sourced by every recipe script, before its `main_ppo` line: where things are, which judge, DRY_RUN, and the
# reference's override lines. Everything a recipe trains with is in its config file (config/<recipe>.yaml).
#   DATA_DIR, MODEL_DIR, OUTPUT_ROOT  the prepared data, the models, the runs' output (defaults: in the checkout)
#   JUDGE_URL                         the code-judge the reward and the tool call (default http://127.0.0.1:8088;
#                                     the configs read it: paper_grpo.yaml, python_tool.yaml)
#   MODEL_PATH                        the training recipes' initial policy (default: MODEL_DIR/<the recipe's model>)
#   DRY_RUN=1                         compose, run the trainer-start checks, print the config, and exit
#   PYTHON                            the interpreter (default python3)
# It rewrites the script's arguments (Hydra overrides) so that the reference's lines mean what they meant there
# (python -m cleaner.recipes.overrides; a note on stderr for each rewrite).

if [[ "${BASH_SOURCE[0]}" == "${0}" ]]; then
    echo "launch.sh is a library: source it from a recipe script" >&2
    exit 2
fi

CLEANER_ROOT="${CLEANER_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
# shellcheck disable=SC2034  # the recipe scripts pass it to main_ppo as --config-dir
CLEANER_CONFIG_DIR="$CLEANER_ROOT/recipe/cleaner/config"
# shellcheck disable=SC2034  # eval_livecodebench.sh scores against it when JUDGE_URL is unset, as the configs do
CLEANER_DEFAULT_JUDGE_URL="http://127.0.0.1:8088"
: "${PYTHON:=python3}"
: "${DATA_DIR:=$CLEANER_ROOT/dataset/prepared}"
: "${MODEL_DIR:=$CLEANER_ROOT/pretrained_models}"
: "${OUTPUT_ROOT:=$CLEANER_ROOT/output}"
export CLEANER_ROOT DATA_DIR MODEL_DIR OUTPUT_ROOT
if [[ "${DRY_RUN:-0}" == "1" ]]; then
    export CLEANER_DRY_RUN=1
fi

# True when this invocation really launches jobs (not DRY_RUN).
recipe_launching() {
    [[ "${DRY_RUN:-0}" != "1" ]]
}

if [[ $# -gt 0 ]]; then
    mapfile -t CLEANER_ARGS < <("$PYTHON" -m cleaner.recipes.overrides "$@")
    set -- "${CLEANER_ARGS[@]}"
fi
