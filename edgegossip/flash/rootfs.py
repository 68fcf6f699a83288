"""The root partition of an image or a disk, read without mounting: its os-release and the
multiarch folder that names its machine.

debugfs (e2fsprogs, on every Debian system) reads an ext4 file system at a byte offset into an
image or a block device (`FILE?offset=N`) with no root, no loop device and no kernel driver, as
mtools does for the FAT boot partition. What it cannot read (no Linux partition, another file
system, debugfs missing) is no evidence: read() returns None and the card is judged by its boot
partition alone."""

from __future__ import annotations

import shutil
import subprocess

from edgegossip.flash.partitions import LINUX, SECTOR, read_mbr

TRIPLETS = {
    "aarch64-linux-gnu": "aarch64",
    "arm-linux-gnueabihf": "armv7l",
    "x86_64-linux-gnu": "x86_64",
}
TIMEOUT_S = 30


def read(path: str) -> dict | None:
    """{"os", "codename", "machine"} of the first Linux partition of the disk at path, or None."""
    if shutil.which("debugfs") is None:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(SECTOR)
        parts = [p for p in read_mbr(head) if p.type == LINUX]
    except (OSError, ValueError):
        return None
    if not parts:
        return None
    spec = f"{path}?offset={parts[0].start}"
    release = _debugfs(spec, "cat /usr/lib/os-release") or _debugfs(spec, "cat /etc/os-release")
    if not release:
        return None
    fields = parse_os_release(release)
    listing = _debugfs(spec, "ls -p /usr/lib")
    machines = [m for t, m in TRIPLETS.items() if f"/{t}/" in listing]
    return {
        "os": fields.get("PRETTY_NAME") or fields.get("NAME"),
        "codename": fields.get("VERSION_CODENAME"),
        "machine": machines[0] if len(machines) == 1 else None,
    }


def parse_os_release(text: str) -> dict[str, str]:
    """os-release(5): KEY=value lines, the value optionally quoted."""
    out = {}
    for line in text.splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key and not key.startswith("#"):
            out[key] = value.strip().strip("\"'")
    return out


def _debugfs(spec: str, request: str) -> str:
    try:
        p = subprocess.run(["debugfs", "-R", request, spec], capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout.decode(errors="replace") if p.returncode == 0 else ""
