#!/usr/bin/env bash
# The main job as it stands: two peers exchange the 2.9 M-parameter MLP over both UDP transports
# with 10% packet loss (real kernel loss in network namespaces when root, injected otherwise),
# then the kernel benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin/edgegossip
$bin exchange --transport both --loss 0.1 --rounds 4
echo
$bin bench kernels
