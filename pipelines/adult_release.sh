#!/usr/bin/env bash
# Release a DP synthetic UCI Adult: pipelines/adult_release.sh [OUT_DIR] [SCHEDULER_ADDRESS] [RUN_ID]
# RUN_ID (e.g. the orchestrator's task id): a retried task with the same id reuses its saved model
# instead of spending privacy budget again (see the privacy ledger in the README).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${DP_DASK_SHARED:-$here/../../shared}/data/adult/adult.csv"
out="${1:-adult-release}"
options=()
if [ -n "${2:-}" ]; then options=(--scheduler "$2"); fi
if [ -n "${3:-}" ]; then options+=(--run-id "$3"); fi
dp-dask synth --data "$data" --schema adult --out "$out" \
    --epsilon 1 --delta 9.313225746154785e-10 --mechanism gaussian --seed 0 "${options[@]}"
