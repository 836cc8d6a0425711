#!/usr/bin/env bash
# CLEANER-4B with the IS-gated rollback ("Plan B", docs/saar.md "Off-policy spans"): each successful retry is
# scored in the context it will have after the splice; when its importance ratio is below ROLLBACK_IS_THRESHOLD
# the failed turn, its error and the retry stay (append: what SAAR-off would have kept), otherwise SAAR replaces as
# in qwen3_4b_cleaner.sh. The rollout server must return prompt log-probs (verl's vLLM and SGLang servers do).
# Everything else as qwen3_4b_cleaner.sh; extra arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen3-4B-CLEANER-IS-gate}"
: "${ROLLBACK_IS_THRESHOLD:=0.5}"
# shellcheck source=recipe/cleaner/qwen3_4b_cleaner.sh
source "$(dirname "${BASH_SOURCE[0]}")/qwen3_4b_cleaner.sh"
