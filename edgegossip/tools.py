"""The system commands edgegossip runs, and the Debian package that brings each.

`require` turns a missing command into a one-line error that names the package, before anything
is started. scripts/system-packages.sh is the install list (make, .ci/run, the README); a test
(tests/test_prerequisites.py) checks that every package named here is on that list.
"""

from __future__ import annotations

import shutil

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
}


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
