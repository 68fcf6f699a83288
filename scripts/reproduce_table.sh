#!/usr/bin/env bash
# Reproduces the MNIST W=4 table of ALGORITHMS.md section 5 with the simulator, two rows at a
# time (one BLAS thread each on a 2-core machine). Writes one JSON file per row to OUT.
# Usage: scripts/reproduce_table.sh [EPOCHS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-20}
out=${2:-runs/table}
mkdir -p "$out"
rows=(
  "allreduce|--algorithm allreduce"
  "local|--algorithm local"
  "eg-p8|--algorithm elastic-gossip --p 1/8"
  "eg-p32|--algorithm elastic-gossip --p 1/32"
  "pull-p8|--algorithm gossip-pull --p 1/8"
  "pull-p32|--algorithm gossip-pull --p 1/32"
  "eg-p32-loss10|--algorithm elastic-gossip --p 1/32 --loss 0.1"
  "eg-p32-loss30|--algorithm elastic-gossip --p 1/32 --loss 0.3"
)
for row in "${rows[@]}"; do echo "$row"; done | \
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 xargs -P 2 -I{} bash -c '
    name=${1%%|*}; args=${1#*|}
    [ -s "'"$out"'/$name.json" ] && exit 0
    echo "edgegossip simulate $args --workers 4 --epochs '"$epochs"' --json" > "'"$out"'/$name.cmd"
    .venv/bin/edgegossip simulate $args --workers 4 --epochs '"$epochs"' --json \
      > "'"$out"'/$name.json.tmp" 2> "'"$out"'/$name.log" && mv "'"$out"'/$name.json.tmp" "'"$out"'/$name.json"
  ' _ {}
