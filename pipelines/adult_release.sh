#!/usr/bin/env bash
# Release a DP synthetic UCI Adult: pipelines/adult_release.sh [OUT_DIR] [SCHEDULER_ADDRESS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="${DP_DASK_SHARED:-$here/../../shared}/data/adult/adult.csv"
out="${1:-adult-release}"
cluster=()
if [ -n "${2:-}" ]; then cluster=(--scheduler "$2"); fi
dp-dask synth --data "$data" --schema adult --out "$out" \
    --epsilon 1 --delta 9.313225746154785e-10 --mechanism gaussian --seed 0 "${cluster[@]}"
