#!/usr/bin/env bash
# The claims under bursts (issue 45, item 3): the same emulated fleet (4 agents, the seed MLP,
# 20 Mbit/s links, 10% loss) per algorithm and mean burst length, as root. One JSON summary per
# run in OUT (default runs/bursts); scripts/burst_markdown.py renders the table of docs/results.md.
# Usage: sudo scripts/burst-sweep.sh [SECONDS] [OUT]
set -euo pipefail
seconds=${1:-150}
out=${2:-runs/bursts}
eg=${EDGEGOSSIP:-.venv/bin/edgegossip}
mkdir -p "$out"
for burst in 1 4 16; do
  for algorithm in elastic-gossip gossip-pull rps allreduce; do
    if [ "$burst" = 1 ]; then model=(--loss-model bernoulli); else model=(--loss-model gilbert-elliott --burst "$burst"); fi
    echo "$algorithm, mean burst $burst, $seconds s" >&2
    "$eg" emulate --nodes 4 --rate 20mbit --loss 0.1 "${model[@]}" --algorithm "$algorithm" \
      --duration "$seconds" --out "$out/$algorithm-burst$burst" --json > "$out/$algorithm-burst$burst.json" \
      || echo "$algorithm burst $burst: exit $?" >&2
  done
done
