# shellcheck shell=bash
# What the check-*.sh scripts share, sourced by each after `set -euo pipefail`: the checkout's
# edgegossip and Python, root and the test group's system packages, a scratch folder removed at
# exit (after `cleanup`, which a script may define), and `step NAME COMMAND...`, which runs a
# command with its output in $out/NAME.log (its stderr in NAME.err) and prints PASS or FAIL with
# the seconds it took.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC2034  # eg and py: for the sourcing script
{
  eg=$here/.venv/bin/edgegossip
  py=$here/.venv/bin/python
}
[ "$(id -u)" = 0 ] || { echo "$(basename "$0"): needs root (namespaces, chroot, nspawn, binfmt)" >&2; exit 3; }
bash "$here/scripts/system-packages.sh" install test >/dev/null
out=$(mktemp -d)
cleanup() { :; }
trap 'cleanup; rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1
step() {
  local name=$1 t0=$SECONDS; shift
  if "$@" >"$out/$name.log" 2>"$out/$name.err"; then
    echo "PASS  $name  $((SECONDS - t0)) s"
  else
    echo "FAIL  $name  $((SECONDS - t0)) s"; tail -n 30 "$out/$name.log" "$out/$name.err" >&2; exit 1
  fi
}
# on_device COMMAND: as root on lab device $device of the fleet folder $out/lab, over the fleet's
# SSH, stdin passed on
on_device() {
  "$py" -c '
import sys
from edgegossip.fleet import inventory
from edgegossip.fleet.ssh import Ssh
f = inventory.load(sys.argv[1])
r = Ssh(f, f.device(sys.argv[2])).run(sys.argv[3], input=sys.stdin.buffer.read(), check=False,
                             timeout=float(sys.argv[4]))
sys.stdout.write(r.stdout.decode())
sys.stderr.write(r.stderr.decode())
sys.exit(r.returncode)
' "$out/lab" "$device" "$1" "${ON_DEVICE_TIMEOUT:-120}"
}
