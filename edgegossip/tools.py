"""The system commands edgegossip runs, and the Debian package that brings each.

`require` turns a missing command into a one-line error that names the package, before anything
is started. scripts/system-packages.sh is the install list (make, .ci/run, docs/install.md); a test
(tests/test_prerequisites.py) checks that every package named here is on that list.
"""

from __future__ import annotations

import re
import shutil
import subprocess
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
    "debugfs": "e2fsprogs",
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


BINFMT = Path("/proc/sys/fs/binfmt_misc")


def enable_binfmt(machine: str) -> None:
    """Make this kernel run `machine`'s programs under qemu-user: binfmt-support's entry from
    qemu-user-static (mounting binfmt_misc first where nothing has), and beside it an entry of
    our own for the same programs that also hands qemu the program already opened (flag O) and
    runs it with the program's credentials (flag C, which implies O). Without O, a program
    started as /proc/self/fd/N from a close-on-exec descriptor (systemd 253+ starts every
    service so, through systemd-executor) is gone before qemu can open it, and no service of a
    booted Trixie root starts; without C, a set-user-ID program (sudo) runs as its caller, and
    no fleet command gets through sudo. Both are what the program would get on its own CPU. The
    newest entry is tried first, so ours wins while it is there; removing it restores the
    distribution's."""
    debian = BINFMT / f"qemu-{machine}"
    if not debian.is_file():
        if not (BINFMT / "register").exists():
            subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], check=False)
        p = subprocess.run(
            ["update-binfmts", "--enable", f"qemu-{machine}"], capture_output=True, text=True
        )
        if p.returncode != 0 or not debian.is_file():
            tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:]
            raise MissingTool(
                f"cannot run {machine} programs here (update-binfmts --enable qemu-{machine}: "
                f"{tail[0] if tail else 'no entry'})"
            )
    ours = BINFMT / f"edgegossip-{machine}"
    if ours.is_file():
        if "flags: POCF" in ours.read_text():
            return
        ours.write_text("-1")  # an entry of an earlier version: made again below
    entry = dict(line.split(" ", 1) for line in debian.read_text().splitlines() if " " in line)
    esc = "".join(f"\\x{b:02x}" for b in bytes.fromhex(entry["magic"]))
    mask = "".join(f"\\x{b:02x}" for b in bytes.fromhex(entry["mask"]))
    rule = f":edgegossip-{machine}:M:{entry['offset']}:{esc}:{mask}:{entry['interpreter']}:POCF"
    (BINFMT / "register").write_text(rule)
