#!/usr/bin/env bash
# A fleet of Pis running 64-bit Raspberry Pi OS, from this x86 machine alone: two arm64 lab
# devices of the release TARGET names (booted Debian under qemu-user), the device wheelhouse
# built here for it, deployed with no package index on the devices, both agents training and
# seen by `fleet status`, and the collected average model scoring at least 0.85. Prints each
# step's time. Tens of minutes under emulation the first time (the lab root, the compile), so
# not in `make test`: tests/test_lab_arm64.py runs the boot and the refusal of a foreign
# wheelhouse there. With MODEL (an inference ONNX file, e.g. tests/fixtures/onnx/fashion_cnn.onnx)
# the devices train it compiled (`model compile`), from a wheelhouse with the onnx extra, and one
# device runs `bench train` on it: its step time and peak RSS under emulation. As root, from a
# checkout with `make venv` done:
#   bash scripts/check-arm64-lab.sh [trixie-arm64|bookworm-arm64] [seconds of training] [MODEL]
set -euo pipefail
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"
target=${1:-trixie-arm64}
train_s=${2:-120}
release=${target%-*}
arch=${target##*-}
source_model=${3:-}
model=logreg extras=()
if [ -n "$source_model" ]; then
  model=$out/model extras=(--extras onnx)
  "$eg" model compile "$source_model" --loss cross-entropy --out "$model" >/dev/null
fi
cleanup() { "$eg" lab down "$out/lab" >/dev/null 2>&1 || true; }
[ -f "$("$py" -c 'from edgegossip.data import mnist; print(mnist.cache_path())')" ] ||
  "$eg" data fetch mnist >/dev/null
step lab-up "$eg" lab up --nodes 2 --arch "$arch" --os "$release" --model "$model" \
  --out "$out/lab" --json
step wheelhouse "$eg" fleet wheelhouse --for "$target" --out "$out/wh" "${extras[@]}" --json
step deploy "$eg" fleet deploy --fleet "$out/lab" --wheelhouse "$out/wh" --json
training() {  # until fleet status shows every device training with steps taken
  local deadline=$((SECONDS + 600))
  while [ $SECONDS -lt $deadline ]; do
    "$eg" fleet status --fleet "$out/lab" --json >"$out/status.json" 2>/dev/null || true
    if "$py" -c '
import json, sys
rows = json.load(open(sys.argv[1]))["devices"]
sys.exit(0 if rows and all(r["state"] == "training" and r["step"] for r in rows) else 1)
' "$out/status.json"; then
      cat "$out/status.json"; return 0
    fi
    sleep 5
  done
  cat "$out/status.json"; return 1
}
step training training
sleep "$train_s"
step status "$eg" fleet status --fleet "$out/lab"
cat "$out/status.log"
step collect "$eg" fleet collect --fleet "$out/lab" --out "$out/collected" --live --json
"$py" - "$out/collected/summary.json" "$out/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows = json.load(open(sys.argv[2]))["devices"]
acc = s["average_model_accuracy"]
print("devices:", ", ".join(f"{r['name']} {r['state']} step {r['step']}" for r in rows))
print(f"average model: test accuracy {acc:.4f}")
sys.exit(0 if acc is not None and acc >= 0.85 else "the average model scored below 0.85")
PY
if [ -n "$source_model" ]; then  # the step as the device's agent runs it, no compiler there,
  # the agents stopped so that the emulated cores are the benchmark's
  step stop "$eg" fleet stop --fleet "$out/lab"
  device=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["devices"][0]["name"])' \
    "$out/status.json")
  ON_DEVICE_TIMEOUT=1800 step bench-train on_device \
    "/opt/edgegossip/venv/bin/edgegossip bench train --model /var/lib/edgegossip/model --steps 3"
  cat "$out/bench-train.log"
fi
