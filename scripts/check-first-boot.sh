#!/usr/bin/env bash
# A flashed card's first boot on the Pi's own architecture and release, from this x86 machine
# alone: an arm64 lab device of the release (booted Debian under qemu-user; Trixie's root holds
# cloud-init configured as Raspberry Pi OS configures it), the device wheelhouse built here,
# `fleet flash` of that release's boot partition, and that card booted as a fresh Pi (`lab
# boot`). On Trixie cloud-init consumes the NoCloud seed from /boot/firmware; on Bookworm
# systemd runs firstrun.sh from the kernel command line, which reboots. The device comes up
# with the flashed hostname, user and key, installs from the card with no package index and no
# compiler, and trains, seen by `fleet status`; the card keeps no secret. Then the same device
# reboots with no time server reachable: it trains again and `fleet status` says its clock is
# unsynchronised. Prints each step's time. As root, from a checkout with `make venv` done:
#   bash scripts/check-first-boot.sh [trixie|bookworm]
set -euo pipefail
# shellcheck source=steps.sh
. "$(dirname "$0")/steps.sh"
os=${1:-trixie}
case $os in trixie | bookworm) ;; *) echo "usage: $0 [trixie|bookworm]" >&2; exit 2 ;; esac
target=$os-arm64
cleanup() { "$eg" lab down "$out/lab" >/dev/null 2>&1 || true; }
until_state() {  # until_state STATE CLOCK [SINCE]: fleet status shows the device so, with
  # steps taken (by an agent started after SECONDS was SINCE, when given: the rebooted one)
  local deadline=$((SECONDS + 900)) since=${3:-}
  while [ $SECONDS -lt $deadline ]; do
    "$eg" fleet status --fleet "$out/lab" --json >"$out/status.json" 2>/dev/null || true
    if "$py" -c '
import json, sys
r = json.load(open(sys.argv[1]))["devices"][0]
young = not sys.argv[4] or (r.get("uptime_s") or 1e9) < float(sys.argv[4])
sys.exit(0 if r["state"] == sys.argv[2] and r["step"] and r["clock"] == sys.argv[3] and young else 1)
' "$out/status.json" "$1" "$2" "${since:+$((SECONDS - since))}"; then
      "$eg" fleet status --fleet "$out/lab"; return 0
    fi
    sleep 5
  done
  "$eg" fleet status --fleet "$out/lab"; return 1
}
[ -f "$("$py" -c 'from edgegossip.data import mnist; print(mnist.cache_path())')" ] ||
  "$eg" data fetch mnist >/dev/null
step lab-up "$eg" lab up --nodes 1 --arch arm64 --os "$os" --model logreg --algorithm local \
  --out "$out/lab" --json
device=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["devices"][0]["name"])' "$out/lab-up.log")
step wheelhouse "$eg" fleet wheelhouse --for "$target" --out "$out/wh" --json
# the boot partition of a Raspberry Pi OS image of the release as Imager leaves it before
# customisation: its build date, the 64-bit kernels, and on Trixie the image's own cloud-init seed
card=$out/card
mkdir -p "$card"
built=$([ "$os" = trixie ] && echo 2025-11-24 || echo 2024-11-19)
echo "Raspberry Pi reference $built" >"$card/issue.txt"
echo "console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 rootfstype=ext4 fsck.repair=yes rootwait quiet" >"$card/cmdline.txt"
printf 'arm_64bit=1\n' >"$card/config.txt"
printf 'kernel\n' >"$card/kernel8.img"; printf 'kernel\n' >"$card/kernel_2712.img"
if [ "$os" = trixie ]; then
  printf '#cloud-config\n' >"$card/user-data"
  printf 'instance-id: rpios-image\n' >"$card/meta-data"
  printf 'network:\n  version: 2\n' >"$card/network-config"
fi
step flash "$eg" fleet flash "$device" --fleet "$out/lab" --boot "$card" --wheelhouse "$out/wh" \
  --target "$target" --json
step first-boot "$eg" lab boot "$out/lab" "$device" --card "$card" --json
step training until_state training unsynchronised
# on the device, as root: what the first boot did, from the card alone
check=$(cat <<'SH'
set -eu
fail() { echo "not provisioned: $*"; exit 1; }
[ "$(hostname)" = "$1" ] || fail "hostname $(hostname)"
user=$(getent passwd 1000 | cut -d: -f1)
id -nG "$user" | tr ' ' '\n' | grep -qx sudo || fail "$user not in sudo"
[ -s "/home/$user/.ssh/authorized_keys" ] || fail "no authorised key"
passwd -S "$user" | grep -q " L " || fail "password not locked"
if [ "$2" = trixie ]; then
  cloud-init status --long
  cloud-init status | grep -q "status: done" || fail "cloud-init not done"
else
  ! grep -q systemd.run /boot/firmware/cmdline.txt || fail "firstrun.sh still on the command line"
  [ ! -e /boot/firmware/firstrun.sh ] || fail "firstrun.sh left"
fi
if command -v gcc || command -v cc; then fail "a compiler"; fi
ls -A /boot/firmware
if ls -A /boot/firmware | grep -qE '^(edgegossip|network-config)$'; then fail "bundle left"; fi
if grep -rqs PRIVATE /boot/firmware; then fail "a private key on the card"; fi
echo "$user: $(id -nG "$user")"
SH
)
step provisioned on_device "sh -s $device $os" <<<"$check"
rebooted=$SECONDS
step reboot on_device "systemd-run --on-active=2 systemctl reboot" </dev/null
step training-after-reboot until_state training unsynchronised "$rebooted"
cat "$out/provisioned.log"
"$py" -c 'import json, sys; print("first boot to sshd with the flashed key:", json.load(open(sys.argv[1]))["boot_s"], "s")' "$out/first-boot.log"
