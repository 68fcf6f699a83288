"""An emulated device without an image: what makes an agent process a device of its own.

Each agent runs in its node's network namespace and, created for it, its own mount, PID, UTS and
IPC namespaces (its own /proc, where it is PID 1 and sees no other agent; its own hostname,
nodeI), as an unprivileged user of its own (uid UID_BASE + I) with no capabilities, no
supplementary groups and no_new_privs: it cannot change its namespace's nftables loss rules or
its link cap, and it can write nothing but its own state folder (mode 0700, its TMPDIR and HOME
inside). Start-up costs one unshare and one setpriv (about 0.1 s), so 32 devices stay cheap; the
lab (edgegossip/lab) boots full Debian devices where the fleet commands need systemd and sshd."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

UID_BASE = 61000


def uid(i: int) -> int:
    return UID_BASE + i


# where a device finds its own things, in its own mount namespace: a private tmpfs on /run
HOME = "/run/device"
STATE = f"{HOME}/state"
CONFIG = f"{HOME}/agent.toml"
CACHE = f"{HOME}/cache"

# The device's memory group where an agent looks for its board's memory (models/footprint.py),
# as a container sees its own: `ip netns exec` mounted a sysfs without the cgroup hierarchies.
# v1's memory hierarchy where the machine has one, else v2's; neither: the RAM alone.
_CGROUPS = """if grep -q ':memory:' /proc/self/cgroup; then
  mount -t tmpfs -o size=4k,mode=0755 cgroups /sys/fs/cgroup && mkdir /sys/fs/cgroup/memory \\
    && mount -t cgroup -o memory,ro memory /sys/fs/cgroup/memory || true
else
  mount -t cgroup2 -o ro cgroup2 /sys/fs/cgroup || true
fi"""

_SETUP = f"""set -e
hostname "$1"; state="$2"; conf="$3"; cache="$4"; shift 4
mount -t tmpfs -o mode=0755,size=4m tmpfs /run
mkdir -p {HOME}/state {HOME}/cache
mount --bind "$state" {STATE}
mount --bind -o ro "$cache" {CACHE}
cp "$conf" {CONFIG}
{_CGROUPS}
exec "$@"
"""


def agent_pid(group: int) -> int | None:
    """The agent process in process group `group` (a device's wrappers share it: a signal
    meant for the agent alone must not reach them), or None once it has gone."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:  # it ended meanwhile
            continue
        # the agent's own command line, not a wrapper's that holds it as arguments
        if int(fields[2]) == group and cmdline[1:4] == [b"-m", b"edgegossip.cli.app", b"agent"]:
            return int(stat.parent.name)
    return None


def replace_config(pid: int, text: str) -> None:
    """Swap the config the device of agent `pid` reads (CONFIG, in its own mount namespace)
    for `text`, whole: written beside it, then renamed over it."""
    script = 'cat > "$1.new" && chmod 0644 "$1.new" && mv -f "$1.new" "$1"'
    subprocess.run(
        ["nsenter", f"--target={pid}", "--mount", "--", "sh", "-c", script, "sh", CONFIG],
        input=text.encode(),
        check=True,
        timeout=10,
    )


def prepare(state: Path, i: int) -> dict:
    """Give device i its state folder (on the host: the run's agentI/); its environment."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "tmp").mkdir(exist_ok=True)
    for p in (state, *state.rglob("*")):  # a resumed device finds its files still its own
        os.chown(p, uid(i), uid(i), follow_symlinks=False)
    state.chmod(0o700)
    return {"HOME": STATE, "TMPDIR": f"{STATE}/tmp", "EDGEGOSSIP_CACHE": CACHE}


def share_read_only(src: Path, dest_dir: Path) -> Path:
    """A world-readable copy of a file every device reads (the host's copy may be private)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    if not dest.is_file() or dest.stat().st_size != src.stat().st_size:
        shutil.copyfile(src, dest)
    dest.chmod(0o444)
    dest_dir.chmod(0o755)
    return dest


def argv(
    netns: str, i: int, state: Path, config: Path, cache: Path, command: list[str]
) -> list[str]:
    """Command line that runs `command` (which reads CONFIG) as device i in network namespace
    netns, with `state` as its STATE and `cache` read-only as its CACHE."""
    return [
        "ip",
        "netns",
        "exec",
        netns,
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--uts",
        "--ipc",
        "--fork",
        "--mount-proc",
        "--",
        "sh",
        "-c",
        _SETUP,
        "sh",
        f"node{i}",
        str(state),
        str(config),
        str(cache),
        "setpriv",
        f"--reuid={uid(i)}",
        f"--regid={uid(i)}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
        *command,
    ]
