#!/usr/bin/env bash
# Proves edgegossip on 64-bit ARM the way a Raspberry Pi owner installs it: builds (once, cached) a
# Debian bookworm arm64 root with debootstrap, runs it under qemu-user, clones this repository
# into it, installs with scripts/install-device.sh as docs/raspberry-pi.md says, then runs the kernel and
# wire tests (the AEAD against its pure-Python reference and RFC 8439), `bench mac`, a short
# `simulate` and two agents exchanging on loopback. Prints what passed and how long each took.
# Emulated speed says nothing about a Pi; correctness and installability it does show. Too slow
# for every CI run (the pyzmq/libzmq build alone takes a long while under emulation): run it by
# hand, as root.  ARM64_ROOT=DIR to choose where the root is kept (default .cache/arm64-root).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=${ARM64_ROOT:-$here/.cache/arm64-root}
[ "$(id -u)" = 0 ] || { echo "check-arm64.sh: needs root (debootstrap, chroot, binfmt)" >&2; exit 3; }
log=$(mktemp -d)/check-arm64
mkdir -p "$log"
results=()
step() {  # step NAME COMMAND...: run, time, record
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$log/$name.log" 2>&1; then
    results+=("PASS  $name  $((SECONDS - t0)) s")
  else
    results+=("FAIL  $name  $((SECONDS - t0)) s  (log: $log/$name.log)")
    tail -20 "$log/$name.log" >&2
  fi
  echo "${results[-1]}"
}

need=""
for cmd in debootstrap:debootstrap qemu-aarch64-static:qemu-user-static update-binfmts:binfmt-support git:git; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need="$need ${cmd#*:}"
done
if [ -n "$need" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true

# the machine's own Debian mirror (deb822 sources first, then the one-line format)
mirror=$( { grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}';
            grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}'; } \
          | grep -E '/debian/?$' | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
if [ ! -x "$root/usr/bin/python3" ]; then
  step debootstrap debootstrap --arch=arm64 --variant=minbase \
    --include=python3,python3-venv,python3-dev,gcc,g++,make,patch,libssl-dev,ca-certificates,git,iproute2 \
    bookworm "$root" "$mirror"
fi
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
for m in proc sys dev; do mountpoint -q "$root/$m" || mount --rbind "/$m" "$root/$m"; done
trap 'for m in dev sys proc; do umount -R "$root/$m" 2>/dev/null || true; done' EXIT

rm -rf "$root/opt/edgegossip-src" "$root/opt/edgegossip"
git clone -q "$here" "$root/opt/edgegossip-src"
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin \
            LANG=C.UTF-8 EDGEGOSSIP_CACHE=/var/cache/edgegossip OPENBLAS_NUM_THREADS=1 "$@"; }
step uname in_root uname -m
step install in_root bash /opt/edgegossip-src/scripts/install-device.sh --zmq-draft /opt/edgegossip
bin=/opt/edgegossip/venv/bin
step implementation in_root $bin/python -c "
import edgegossip.kernels as k, edgegossip.dataplane.aead as a, zmq
assert k.IMPLEMENTATION == 'cython', k.IMPLEMENTATION
assert a.IMPLEMENTATION == 'openssl', a.IMPLEMENTATION
assert zmq.has('draft')
print('kernels', k.IMPLEMENTATION, 'aead', a.IMPLEMENTATION, 'zmq', zmq.zmq_version())"
step pytest-install in_root $bin/pip install -q pytest pytest-timeout
# the tests run from a copy outside the source tree, so `edgegossip` is the installed package
# with its compiled modules, not the source folder (which has none)
step kernel-and-wire-tests in_root sh -c "rm -rf /tmp/eg-tests && cp -r /opt/edgegossip-src/tests /tmp/eg-tests \
  && cd /tmp/eg-tests && CI=true $bin/python -m pytest -q -p no:cacheprovider -rs \
  test_kernels.py test_wire.py test_inbox.py test_fast_path.py test_hardening.py"
step bench-mac in_root $bin/edgegossip bench mac --seconds 0.3
step data-fetch in_root $bin/edgegossip data fetch mnist
step simulate in_root $bin/edgegossip simulate --algorithm elastic-gossip --loss 0.1 --model logreg --nodes 4 --epochs 1 --json
cat > "$root/tmp/a0.toml" <<TOML
[agent]
id = 0
listen = "127.0.0.1:47100"
peers = ["1@127.0.0.1:47101"]
key = "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
output = "/tmp/a0"
[train]
workers = 2
model = "logreg"
p = 0.2
max_steps = 1500
eval_every = 500
[net]
deadline_s = 5.0
TOML
sed -e 's/^id = 0/id = 1/' -e 's/47100"/47199"/' -e 's/"1@127.0.0.1:47101"/"0@127.0.0.1:47100"/' \
    -e 's/47199"/47101"/' -e 's#/tmp/a0#/tmp/a1#' "$root/tmp/a0.toml" > "$root/tmp/a1.toml"
step two-agents in_root sh -c "rm -rf /tmp/a0 /tmp/a1; $bin/edgegossip agent --config /tmp/a0.toml --json > /tmp/a0.json & \
  $bin/edgegossip agent --config /tmp/a1.toml --json > /tmp/a1.json; wait; \
  $bin/python -c \"import json; r=[json.load(open(f'/tmp/a{i}.json')) for i in (0,1)]; \
  print([(x['step'], x['accuracy'], x['exchanges']) for x in r]); \
  assert all(x['exchanges'].get('completed', 0) > 0 for x in r)\""
echo
echo "edgegossip on arm64 (qemu-user, Debian bookworm), $(date -u +%F):"
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q '^FAIL'
