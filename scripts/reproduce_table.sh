#!/usr/bin/env bash
# Reproduces the MNIST W=4 table of ALGORITHMS.md section 5 with the simulator, PARALLEL rows at
# a time (default 2: one BLAS thread each on a 2-core machine). Writes one JSON file per row to
# OUT, and OUT/ROW.history.jsonl with the row every EVAL_EVERY epochs (default 5), so a run cut
# short still gives the table at the last epoch every row reached:
#   python scripts/table_markdown.py OUT EPOCH
# Usage: [PARALLEL=8] [EVAL_EVERY=5] scripts/reproduce_table.sh [EPOCHS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=${1:-20}
out=${2:-runs/table}
parallel=${PARALLEL:-2}
every=${EVAL_EVERY:-5}
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
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 xargs -P "$parallel" -I{} bash -c '
    name=${1%%|*}; args=${1#*|}
    [ -s "'"$out"'/$name.json" ] && exit 0
    echo "edgegossip simulate $args --nodes 4 --epochs '"$epochs"' --json" > "'"$out"'/$name.cmd"
    .venv/bin/edgegossip simulate $args --nodes 4 --epochs '"$epochs"' --json \
      --eval-every '"$every"' --history "'"$out"'/$name.history.jsonl" > "'"$out"'/$name.json.tmp" 2> "'"$out"'/$name.log" && mv "'"$out"'/$name.json.tmp" "'"$out"'/$name.json"
  ' _ {}
