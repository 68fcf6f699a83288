#!/usr/bin/env bash
# The measured outcomes of the emulated fleet (docs/results.md, "Emulated fleet"): needs root. Runs one
# experiment after another (they share 2 cores) and leaves each summary.json under OUT.
# Usage: scripts/outcomes.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/outcomes}
mkdir -p "$out"
eg=".venv/bin/edgegossip emulate --json"
run() {  # name, then emulate arguments
  local name=$1; shift
  [ -s "$out/$name.json" ] && return 0
  echo "edgegossip emulate $*" > "$out/$name.cmd"
  $eg --out "$out/$name" "$@" > "$out/$name.json.tmp" 2> "$out/$name.err" \
    && mv "$out/$name.json.tmp" "$out/$name.json"
}
run eg-loss10 --nodes 4 --algorithm elastic-gossip --loss 0.1 --rate 20mbit --duration 300
run eg-loss0  --nodes 4 --algorithm elastic-gossip --loss 0   --rate 20mbit --duration 300
run allreduce-loss10 --nodes 4 --algorithm allreduce --loss 0.1 --rate 20mbit --duration 300
for n in 4 8; do
  for l in 0 0.1 0.3; do
    run "rps-n$n-loss$l" --nodes $n --algorithm rps --loss $l --rate 100mbit --duration 180
  done
done
# time to 97% held-out accuracy needs a longer Elastic Gossip run than 300 s at 20 Mbit/s
run eg-loss10-600s --nodes 4 --algorithm elastic-gossip --loss 0.1 --rate 20mbit --duration 600
