#!/usr/bin/env bash
# The device wheelhouse built on this machine, proven on the device's platform: runs
# `edgegossip fleet wheelhouse --for TARGET` (the first time it builds the target's Debian root
# and compiles edgegossip in it under qemu-user), then installs that wheelhouse into a fresh
# venv of the target's root with no package index and binary wheels only (nothing compiled),
# and runs the kernels, the compiled wire path and a short simulation there; then builds the
# wheelhouse again from the unchanged tree. Prints each step's time. Minutes under emulation,
# so not in `make test` (tests/test_targets.py covers the rest of the build there). As root,
# from a checkout with `make venv` done:  bash scripts/check-target.sh [trixie-arm64]
set -euo pipefail
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"
target=${1:-trixie-arm64}
step wheelhouse "$eg" fleet wheelhouse --for "$target" --out "$out/wh" --json
root=$("$py" -c "from edgegossip.fleet import crossbuild, targets; print(crossbuild.root_path(targets.TARGETS['$target']))")
rm -rf "$root/opt/wh" "$root/opt/check"
cp -r "$out/wh" "$root/opt/wh"
mnist=$("$py" -c "from edgegossip.data import mnist; print(mnist.cache_path())")
[ -f "$mnist" ] || "$eg" data fetch mnist >/dev/null
mkdir -p "$root/root/.cache/edgegossip"
cp "$mnist" "$root/root/.cache/edgegossip/mnist.npz"
cpu=$("$py" -c "from edgegossip.fleet import targets; print(targets.QEMU_CPU[targets.TARGETS['$target'].machine])")
in_root() {  # chrooted, with its own /proc and /dev that go away with the namespace
  # shellcheck disable=SC2016  # expanded by the inner sh
  QEMU_CPU=$cpu unshare --mount --propagation private sh -c 'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 OPENBLAS_NUM_THREADS=1 QEMU_CPU="$QEMU_CPU" "$@"' "$root" "$@"
}
step venv in_root python3 -m venv --without-pip /opt/check
# the root's own pip installs into the new venv: the device's is the one its venv brings
step install-offline in_root /opt/build/bin/pip --python /opt/check/bin/python install --quiet \
  --no-index --only-binary :all: --find-links /opt/wh edgegossip
step compiled in_root /opt/check/bin/python -c "
import platform, edgegossip.kernels as k, edgegossip.dataplane.aead as a
assert platform.machine() == 'aarch64' and k.IMPLEMENTATION == 'cython' and a.IMPLEMENTATION == 'openssl'
print(platform.machine(), k.IMPLEMENTATION, a.IMPLEMENTATION)"
step bench-kernels in_root /opt/check/bin/edgegossip bench kernels --json --size 20000 --repeat 1
step simulate in_root /opt/check/bin/edgegossip simulate --algorithm elastic-gossip --model logreg \
  --nodes 2 --epochs 0.2 --json
step wheelhouse-again "$eg" fleet wheelhouse --for "$target" --out "$out/wh2" --json
cmp <("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['release'])" "$out/wh/edgegossip-wheelhouse.json") \
    <("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['release'])" "$out/wh2/edgegossip-wheelhouse.json") \
  && echo "same release both times"
