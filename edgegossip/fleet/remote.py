"""What runs on a device, as root, over SSH: the probe, the install, service control, logs and
fetching the agent's output. Scripts go in on stdin; nothing but bash, python3 and coreutils is
assumed on the device (Raspberry Pi OS Lite has them)."""

from __future__ import annotations

import io
import json
import math
import shlex
import tarfile
import time
from pathlib import Path

from edgegossip.data.mnist import DATASETS
from edgegossip.errors import PREFIX as ERROR_PREFIX
from edgegossip.fleet import agentconf as paths
from edgegossip.fleet.ssh import Ssh, SshError, last_line

BASE = "/opt/edgegossip"
STAGE = f"{BASE}/incoming"
UNIT = paths.UNIT
DISK_FULL = 28  # the install script's exit code when /opt lacks room (ENOSPC's number)

SYSCTL = """# the agent (no CAP_NET_ADMIN) asks for a large UDP receive buffer so a burst of a peer's
# datagrams waits in the kernel while training holds the CPU; the default cap is 208 KB
net.core.rmem_max = 8388608
"""

PROBE = r"""
set -u
b=/opt/edgegossip
free=$(df -Pm "$( [ -d $b ] && echo $b || echo /opt )" 2>/dev/null | awk 'NR==2 {print $4}')
rel=""; [ -L $b/venv ] && rel=$(basename "$(dirname "$(readlink $b/venv)")")
ver=""; [ -x $b/venv/bin/edgegossip ] && ver=$($b/venv/bin/edgegossip --version 2>/dev/null | awk '{print $NF}')
sha() { [ -f "$1" ] && sha256sum "$1" | cut -c1-64 || echo ""; }
python3 - "$free" "$rel" "$ver" "$(sha /var/lib/edgegossip/data/device.npz)" \
  "$(systemctl is-active edgegossip-agent 2>/dev/null)" \
  "$(ls $b/releases 2>/dev/null | tr '\n' ' ')" "$(sha /var/lib/edgegossip/model/manifest.json)" \
  DATASET_SHAS <<'PY'
import json, platform, sys
a = sys.argv[1:]
mem = [l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal:")]
print(json.dumps({"machine": platform.machine(), "python": "%d.%d" % sys.version_info[:2],
                  "glibc": platform.libc_ver()[1], "mem_mb": int(mem[0]) // 1024 if mem else None,
                  "free_mb": int(a[0] or 0), "release": a[1], "version": a[2], "data_sha": a[3],
                  "service": a[4], "releases": a[5].split(), "model_sha": a[6],
                  "dataset_sha": dict(zip(DATASET_NAMES, a[7:]))}))
PY
""".replace(  # the SHA-256 of each data set's copy in the device's cache, by name
    "DATASET_SHAS", " ".join(f'"$(sha /var/lib/edgegossip/cache/{n}.npz)"' for n in DATASETS)
).replace("DATASET_NAMES", repr(list(DATASETS)))

INSTALL = r"""
set -euo pipefail
stage=$1; rel=$2; extras=$3; b=/opt/edgegossip; r=$b/releases/$rel
changed=0 reread=0  # reread: only the config or the link keys changed; the agent reloads them
if [ ! -f "$r/.complete" ]; then
  rm -rf "$r"; mkdir -p "$r"
  python3 -m venv "$r/venv"
  "$r/venv/bin/pip" install --quiet --no-index --find-links "$stage/wheels" "edgegossip$extras"
  touch "$r/.complete"; changed=1
fi
getent group edgegossip >/dev/null || groupadd --system edgegossip
getent passwd edgegossip >/dev/null || useradd --system --gid edgegossip --no-create-home \
  --home-dir /var/lib/edgegossip --shell /usr/sbin/nologin edgegossip
put() {  # put SRC DEST MODE OWNER [FLAG]: replace only when different, and set FLAG (changed)
  if ! cmp -s "$1" "$2"; then
    rm -f "$2.new"; install -m "$3" -o "${4%%:*}" -g "${4##*:}" "$1" "$2.new"; mv -f "$2.new" "$2"
    printf -v "${5:-changed}" 1
  fi
}
real_dir() {  # real_dir DIR MODE OWNER: a directory, never a link (root would follow it)
  if [ -L "$1" ] || { [ -e "$1" ] && [ ! -d "$1" ]; }; then rm -f "$1"; fi
  install -d -m "$2" -o "${3%%:*}" -g "${3##*:}" "$1"
}
install -d -m 0755 /etc/edgegossip
install -d -m 0750 -o root -g edgegossip /etc/edgegossip/control /etc/edgegossip/control/clients
# The state folder is root's and the agent writes only out/: an agent (or whoever holds its
# user) cannot swap data/ or cache/ for a link to, say, /etc/sudoers.d and have root chown it or
# write through it. The parent becomes root's first, so nothing can race the checks below it.
real_dir /var/lib/edgegossip 0755 root:root
real_dir /var/lib/edgegossip/data 0750 root:edgegossip
real_dir /var/lib/edgegossip/cache 0750 root:edgegossip
real_dir /var/lib/edgegossip/out 0750 edgegossip:edgegossip
put "$stage/agent.toml" /etc/edgegossip/agent.toml 0640 root:edgegossip reread
put "$stage/link.keys" /etc/edgegossip/link.keys 0640 root:edgegossip reread
put "$stage/server.key_secret" /etc/edgegossip/control/server.key_secret 0640 root:edgegossip
put "$stage/client.key" /etc/edgegossip/control/clients/client.key 0644 root:root
[ -f "$stage/device.npz" ] && put "$stage/device.npz" /var/lib/edgegossip/data/device.npz 0640 root:edgegossip
for f in "$stage"/cache/*.npz; do  # the fleet's data set, as its name in the operator's cache
  [ -f "$f" ] && put "$f" "/var/lib/edgegossip/cache/$(basename "$f")" 0640 root:edgegossip
done
if [ -d "$stage/model" ]; then  # a compiled model: swapped whole, never half of one
  rm -rf /var/lib/edgegossip/model.new /var/lib/edgegossip/model.old
  install -d -m 0750 -o root -g edgegossip /var/lib/edgegossip/model.new
  for f in "$stage"/model/*; do install -m 0640 -o root -g edgegossip "$f" /var/lib/edgegossip/model.new/; done
  if [ -e /var/lib/edgegossip/model ] || [ -L /var/lib/edgegossip/model ]; then mv -T /var/lib/edgegossip/model /var/lib/edgegossip/model.old; fi
  mv -T /var/lib/edgegossip/model.new /var/lib/edgegossip/model; rm -rf /var/lib/edgegossip/model.old; changed=1
fi
put "$stage/edgegossip-agent.service" /etc/systemd/system/edgegossip-agent.service 0644 root:root
put "$stage/60-edgegossip.conf" /etc/sysctl.d/60-edgegossip.conf 0644 root:root
sysctl -q -p /etc/sysctl.d/60-edgegossip.conf 2>/dev/null || true  # read-only in containers
if [ -d $b/venv ] && [ ! -L $b/venv ]; then mv $b/venv "$b/releases/preinstalled-$(date +%s)"; fi
if [ "$(readlink $b/venv 2>/dev/null)" != "$r/venv" ]; then
  ln -sfn "$r/venv" $b/venv.new && mv -T $b/venv.new $b/venv; changed=1
fi
# keep the release in use and the one before it, for a manual rollback
{ ls -1t $b/releases | grep -vx "$rel" || true; } | tail -n +2 | while read -r old; do rm -rf "$b/releases/$old"; done
rm -rf "$stage"
systemctl daemon-reload
systemctl enable --quiet edgegossip-agent
if [ "${EG_NO_START:-0}" = 1 ]; then :  # first boot: the agent waits for the clock
elif [ $changed = 1 ]; then systemctl restart edgegossip-agent
# a running agent takes new peers without a restart, and restarts itself for anything else
elif [ $reread = 1 ] && systemctl is-active --quiet edgegossip-agent; then systemctl reload edgegossip-agent
else systemctl start edgegossip-agent; fi
[ $reread = 1 ] && changed=1
echo "{\"changed\": $( [ $changed = 1 ] && echo true || echo false ), \"version\": \"$($b/venv/bin/edgegossip --version | awk '{print $NF}')\"}"
"""


def probe(ssh: Ssh) -> dict:
    p = ssh.run("bash -s", input=PROBE.encode(), timeout=30)
    try:
        return json.loads(last_line(p.stdout))
    except ValueError:
        raise SshError(
            f"probe gave no answer ({last_line(p.stderr) or 'python3 missing?'})"
        ) from None


def install(ssh: Ssh, archive: bytes, release: str, extras: str) -> dict:
    """Unpack archive into the stage and run the install there; its {"changed", "version"}."""
    # bundle.load() let only a hex release and known extras through; quoted all the same
    script = (
        f"set -e; rm -rf {STAGE}; mkdir -p {STAGE}; tar -x -C {STAGE}; "
        f"bash {STAGE}/install.sh {STAGE} {shlex.quote(release)} {shlex.quote(extras)}"
    )
    cmd = f"bash -c {shlex.quote(script)}"
    p = ssh.run(cmd, input=archive, timeout=900, check=False)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace")
        if "No space left" in err:
            ssh.run(f"rm -rf {STAGE}", check=False)
            raise SshError(
                f"disk full on the device ({last_line(err)}); nothing was changed "
                "there but the staging folder, now removed"
            )
        raise SshError(last_line(err) or f"install exit {p.returncode}")
    return json.loads(last_line(p.stdout))


def service(ssh: Ssh, action: str) -> str:
    """systemctl ACTION the agent; its state afterwards."""
    ssh.run(f"systemctl {action} {UNIT}", timeout=90)
    return ssh.run(f"systemctl is-active {UNIT}", check=False, timeout=15).stdout.decode().strip()


def service_state(ssh: Ssh) -> tuple[str, str]:
    """(systemd's state of the unit, its last log line; where the agent is not running, its
    own one-line reason if it gave one (a refusal at start: a model, a file it cannot read);
    where first boot's install failed and the agent never ran, that failure)."""
    p = ssh.run(
        f"bash -c 'systemctl is-active {UNIT}; "
        f"journalctl -t {paths.FIRSTBOOT_TAG} -n 1 -o cat --no-pager | sed s/^/F:/; "
        f"journalctl -u {UNIT} -n 50 -o cat --no-pager | grep -F {shlex.quote(ERROR_PREFIX)} "
        "| tail -n 1 | sed s/^/E:/; "
        f"journalctl -u {UNIT} -n 1 -o cat --no-pager'",
        check=False,
        timeout=20,
    )
    lines = [ln.strip() for ln in p.stdout.decode(errors="replace").splitlines()]
    active = lines[0] if lines else "unknown"
    failed = [ln[2:] for ln in lines[1:] if ln.startswith("F:")]
    said = [ln[2 + len(ERROR_PREFIX) :] for ln in lines[1:] if ln.startswith("E:")]
    logs = [ln for ln in lines[1:] if ln[:2] not in ("F:", "E:") and ln]
    if failed and not logs:  # the agent never ran: say why
        return active, f"first boot: {failed[-1]}"
    if said and active != "active":  # it stopped, and said why
        return active, said[-1]
    return active, (logs[-1] if logs else "")


def logs_command(lines: int, follow: bool) -> str:
    return f"journalctl -u {UNIT} -n {int(lines)} --no-pager -o short-iso" + (
        " -f" if follow else ""
    )


def put_config(ssh: Ssh, toml_text: str) -> None:
    """Replace agent.toml atomically (it is validated already)."""
    ssh.run(
        f"bash -c 'install -m 0640 -o root -g edgegossip /dev/stdin {paths.CONFIG}.new && "
        f"mv -f {paths.CONFIG}.new {paths.CONFIG}'",
        input=toml_text.encode(),
        timeout=30,
    )


# what `fleet collect` takes from one device: a checkpoint and the metrics. Far above what an
# honest agent writes (the seed MLP's checkpoint is 23 MB; metrics are kept within their budget),
# and the bound on what a compromised device can make the operator hold or write.
MAX_MEMBER = 256 << 20
OUTPUT_NAMES = ("checkpoint.npz", "metrics.jsonl")
# the device's tar writes those two members; a reply holding many more is not its tar. Each
# header costs the reader a block: this bounds the work the reply causes, not only its bytes
MAX_MEMBERS = 16
PARSE_S = 60.0  # reading the archive, when the device's deadline does not say less


def fetch_output(ssh: Ssh, dest: Path) -> list[str]:
    """Copy the agent's checkpoint and metrics into dest; the names copied. The archive is
    the device's word: a plain (uncompressed) tar, read only as far as MAX_MEMBERS headers and
    the device's deadline; only regular, non-sparse members with the expected names and sizes
    within MAX_MEMBER are taken, and the whole reply is cut off past what those can total."""
    p = ssh.run(
        f"bash -c 'cd {paths.OUTPUT} && tar -c --ignore-failed-read "
        f"{' '.join(OUTPUT_NAMES)} 2>/dev/null'",
        timeout=300,
        check=False,
        limit=len(OUTPUT_NAMES) * (MAX_MEMBER + (64 << 10)) + (64 << 10),
    )
    dest.mkdir(parents=True, exist_ok=True)
    deadline = getattr(ssh, "deadline", None)
    end = min(math.inf if deadline is None else deadline, time.monotonic() + PARSE_S)
    got: list[str] = []
    try:
        # "r:": never a compressed stream, which tarfile would otherwise detect and inflate
        with tarfile.open(fileobj=io.BytesIO(p.stdout), mode="r:") as t:
            for n, m in enumerate(t, 1):
                if n > MAX_MEMBERS or time.monotonic() > end:
                    break
                if (
                    m.name not in OUTPUT_NAMES
                    or m.name in got
                    or not m.isreg()
                    or m.issparse()
                    or not 0 <= m.size <= MAX_MEMBER
                ):
                    continue
                member = t.extractfile(m)
                if member is None:
                    continue
                data = member.read(MAX_MEMBER + 1)
                if len(data) != m.size:
                    continue  # a truncated member is no checkpoint
                (dest / m.name).write_bytes(data)
                got.append(m.name)
    except (tarfile.TarError, OSError, EOFError):
        pass
    if "checkpoint.npz" not in got:
        raise SshError(f"no checkpoint in {paths.OUTPUT} yet")
    return got
