#!/usr/bin/env bash
# CLEANER-4B with the reference authors' "one-tolerance" (docs/saar.md): a position's first failure and its error
# stay in the trajectory; from its second failure on, SAAR rolls back as in qwen3_4b_cleaner.sh (failure, failure,
# success keeps the first failure, its error, then the success). Everything else as qwen3_4b_cleaner.sh; extra
# arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen3-4B-CLEANER-one-tolerance}"
: "${ROLLBACK_AFTER_ERRORS:=2}"
# shellcheck source=recipe/cleaner/qwen3_4b_cleaner.sh
source "$(dirname "${BASH_SOURCE[0]}")/qwen3_4b_cleaner.sh"
