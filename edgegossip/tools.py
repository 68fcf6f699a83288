"""The system commands edgegossip runs, and the Debian package that brings each.

`require` turns a missing command into a one-line error that names the package, before anything
is started. scripts/system-packages.sh is the install list (make, .ci/run, the README); a test
(tests/test_prerequisites.py) checks that every package named here is on that list.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from edgegossip.errors import EdgegossipError

PACKAGES = {
    "ip": "iproute2",
    "tc": "iproute2",
    "nft": "nftables",
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "mcopy": "mtools",
    "podman": "podman",
    "podman-compose": "podman-compose",
    "qemu-aarch64-static": "qemu-user-static",
    "update-binfmts": "binfmt-support",
}
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class MissingTool(EdgegossipError, RuntimeError):
    """A system command is not installed; the message names its package."""


def require(*commands: str, why: str = "") -> None:
    missing = [c for c in commands if shutil.which(c) is None]
    if missing:
        pkgs = sorted({PACKAGES.get(c, c) for c in missing})
        need = f" ({why})" if why else ""
        raise MissingTool(
            f"{', '.join(missing)} not found{need}: install the Debian package"
            f"{'s' if len(pkgs) > 1 else ''} {' '.join(pkgs)} "
            "(as root: bash scripts/system-packages.sh install demo, or apt-get install)"
        )


def debian_mirror() -> str:
    """The Debian mirror this machine's apt already uses: a root built from it needs no other
    network."""
    for f in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = f.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)\s+", text, re.M
        )
        if m:
            return m.group(1)
    return DEFAULT_MIRROR
