#!/usr/bin/env bash
# The main job: fetch MNIST (once), then an emulated fleet of 4 agents training the seed MLP with
# Elastic Gossip over UDP at 10% packet loss on 20 Mbit/s links for a few minutes. As root each
# agent gets its own network namespace and the kernel drops real packets (nftables); without
# root the same agents run on 127.0.0.0/8 with the loss injected, and every output says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin/edgegossip
duration=${DEMO_DURATION:-180}
$bin data fetch mnist
out=runs/demo-$(date +%Y%m%d-%H%M%S)
$bin emulate --nodes 4 --algorithm elastic-gossip --loss 0.1 --rate 20mbit \
  --duration "$duration" --out "$out"
echo "metrics, checkpoints, summary.json and plots are in $out"
