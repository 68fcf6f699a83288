#!/usr/bin/env bash
# The main job: fetch MNIST (once), then an emulated fleet of 4 agents training the seed MLP with
# Elastic Gossip over UDP at 10% packet loss on 20 Mbit/s links for a few minutes. As root, with
# iproute2 and nftables, each agent gets its own network namespace and the kernel drops real
# packets; otherwise the same agents run on 127.0.0.0/8 with the loss injected, and it says why.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin/edgegossip
duration=${DEMO_DURATION:-180}
$bin data fetch mnist
out=runs/demo-$(date +%Y%m%d-%H%M%S)
backend=netns
if [ "$(id -u)" != 0 ]; then
  backend=loopback
  echo "demo: not root, so the loopback backend (loss injected in the receive path); run as root for real namespaces and kernel packet loss" >&2
elif missing=$(bash scripts/system-packages.sh missing demo | tr '\n' ' ') && [ -n "${missing// /}" ]; then
  backend=loopback
  echo "demo: missing $missing- so the loopback backend; install them (bash scripts/system-packages.sh install demo) for kernel packet loss" >&2
fi
$bin emulate --backend "$backend" --nodes 4 --algorithm elastic-gossip --loss 0.1 --rate 20mbit \
  --duration "$duration" --out "$out"
echo "metrics, checkpoints, summary.json and plots are in $out"
