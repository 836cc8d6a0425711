#!/usr/bin/env bash
# Stratified filtering of the training set by 8-rollout success rate (the 7B recipes' data), then
# preparation of the kept rows for training (with and without tools).
#   DATASET=dataset/Open-AgentRL-30K/Open-AgentRL-30K.parquet   the rows the rollouts ran on (uid = row index)
#   STATS=dataset/filter/stats.jsonl                             one record per prompt (dataset/README.md); when it
#       is absent, the reference implementation's location is used if present:
#       dataset/Open-AgentRL-30K/Open-AgentRL-30K.filtered.parquet.success.jsonl
#   FILTER_DIR=dataset/filter                                    filtered_sr.parquet is written here
#   DATA_DIR=dataset/prepared                                    filtered_sr[.notool].parquet for the recipes
# Extra arguments go to `cleaner data filter`, e.g. --success_rate_ratios "0,0.8,0.9,1,1,1,1,1,0" or --retain_code.
set -euo pipefail

CLEANER_ROOT="${CLEANER_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"
: "${PYTHON:=python3}"
: "${DATASET:=$CLEANER_ROOT/dataset/Open-AgentRL-30K/Open-AgentRL-30K.parquet}"
REFERENCE_STATS="$CLEANER_ROOT/dataset/Open-AgentRL-30K/Open-AgentRL-30K.filtered.parquet.success.jsonl"
stats_hint=""
if [[ -z "${STATS:-}" ]]; then
    STATS="$CLEANER_ROOT/dataset/filter/stats.jsonl"
    stats_hint=" or $REFERENCE_STATS"
    if [[ ! -f "$STATS" && -f "$REFERENCE_STATS" ]]; then
        STATS="$REFERENCE_STATS"
    fi
fi
: "${FILTER_DIR:=$CLEANER_ROOT/dataset/filter}"
: "${DATA_DIR:=$CLEANER_ROOT/dataset/prepared}"

missing=""
[[ -f "$DATASET" ]] || missing+=" DATASET=$DATASET"
[[ -f "$STATS" ]] || missing+=" STATS=$STATS$stats_hint"
if [[ -n "$missing" ]]; then
    echo "data_filter.sh: missing input file(s):$missing (see dataset/README.md)" >&2
    exit 1
fi

"$PYTHON" -m cleaner.cli data filter --dataset "$DATASET" --stats "$STATS" --output-dir "$FILTER_DIR" \
    --prepared-dir "$DATA_DIR" "$@"
