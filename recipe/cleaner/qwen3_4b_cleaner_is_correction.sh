#!/usr/bin/env bash
# CLEANER-4B with IS-corrected replacement ("Plan C", docs/saar.md "Off-policy spans"): SAAR replaces as in
# qwen3_4b_cleaner.sh, and verl's token-level rollout importance sampling weights every trained token by
# exp(recomputed log-prob - rollout log-prob); on spliced tokens the rollout log-prob is the one sampled in the
# context that held the error. ROLLBACK_IS_CORRECTION=True makes CALCULATE_LOG_PROBS=True and ROLLOUT_IS=token the
# defaults (common.sh). Everything else as qwen3_4b_cleaner.sh; extra arguments are Hydra overrides.
set -euo pipefail

: "${EXPERIMENT_NAME:=Qwen3-4B-CLEANER-IS-correction}"
: "${ROLLBACK_IS_CORRECTION:=True}"
# shellcheck source=recipe/cleaner/qwen3_4b_cleaner.sh
source "$(dirname "${BASH_SOURCE[0]}")/qwen3_4b_cleaner.sh"
