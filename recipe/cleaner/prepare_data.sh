#!/usr/bin/env bash
# Build the verl RLHF parquet files the recipes read, from the published data (layout: dataset/README.md).
# Writes, in DATA_DIR, each file twice: NAME.parquet (tool prompts, cleaner_tool_agent) and
# NAME.notool.parquet (no-tool baselines). SKIP_BAD=1 drops malformed rows (and counts them) instead of stopping.
#   RAW_DIR=dataset  DATA_DIR=dataset/prepared  SKIP_BAD=0
set -euo pipefail

CLEANER_ROOT="${CLEANER_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${PYTHON:=python3}"
: "${RAW_DIR:=$CLEANER_ROOT/dataset}"
: "${DATA_DIR:=$CLEANER_ROOT/dataset/prepared}"
: "${SKIP_BAD:=0}"

extra=()
if [[ "$SKIP_BAD" == "1" ]]; then
    extra+=(--skip-bad)
fi
"$PYTHON" -m cleaner.cli data prepare-all --raw-dir "$RAW_DIR" --output-dir "$DATA_DIR" "${extra[@]}"
echo "prepared files are in $DATA_DIR; the 7B recipes also need filtered_sr.parquet (data_filter.sh)"
