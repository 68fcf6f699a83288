"""The Debian bookworm root that every lab device boots read-only (each under its own throw-away
overlay). Built once with debootstrap from the machine's own Debian mirror and cached: about 2.5
minutes and 330 MB. It holds what Raspberry Pi OS Lite holds that deploy relies on (systemd,
sshd, python3 with venv) and nothing of edgegossip: deploy must bring that."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from edgegossip import paths, tools
from edgegossip.errors import EdgegossipError

PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "iproute2",
    "libssl3",
    "procps",
    "sudo",
    "nftables",
)
USER = "pi"  # as on Raspberry Pi OS: a login user with passwordless sudo, not root
SUITE = "bookworm"


class RootError(EdgegossipError, RuntimeError):
    pass


def default_cache() -> Path:
    env = os.environ.get("EDGEGOSSIP_LAB_CACHE")
    if env:
        return Path(env)
    return paths.cache_dir() / "lab"


mirror = tools.debian_mirror  # the lab roots come from the mirror apt already uses


CONFIGURED = 2  # bump when _configure changes: a cached root is then built afresh


def _stamp() -> str:
    return hashlib.sha256(" ".join((SUITE, *PACKAGES, str(CONFIGURED))).encode()).hexdigest()[:12]


def path(cache: Path | None = None) -> Path:
    return (cache or default_cache()) / f"root-{SUITE}-{_stamp()}"


def ensure(cache: Path | None = None, progress=print) -> Path:
    """The cached root, built first if missing (an interrupted build is started over)."""
    root = path(cache)
    if (root / ".edgegossip-lab-ready").is_file():
        return root
    tools.require("debootstrap", "systemd-nspawn", why="the lab's Debian root")
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    progress(f"building the lab's Debian {SUITE} root in {root} (once; about 2.5 minutes)")
    p = subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(partial),
            mirror(),
        ],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:]
        raise RootError(f"debootstrap failed: {tail[0] if tail else p.returncode}")
    _configure(partial)
    (partial / ".edgegossip-lab-ready").touch()
    partial.rename(root)
    return root


def _configure(root: Path) -> None:
    # host keys are per device (bound in at boot); the root's own would make every device the same
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (root / "etc/ssh/sshd_config.d/lab.conf").write_text(
        "HostKey /etc/ssh/lab/ssh_host_ed25519_key\nPasswordAuthentication no\nPermitRootLogin no\n"
    )
    p = subprocess.run(
        [
            "chroot",
            str(root),
            "useradd",
            "--create-home",
            "--shell",
            "/bin/bash",
            "--groups",
            "sudo",
            USER,
        ],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise RootError(f"useradd {USER} in the lab root: {p.stderr.strip()}")
    # pam_nologin refuses every user but root until boot has finished (/run/nologin): a boot job
    # that hangs (seen: more than 90 s, now and then) then kept a lab device unreachable; a lab
    # device answers as soon as sshd does
    pam = root / "etc/pam.d/sshd"
    pam.write_text(
        "".join(ln for ln in pam.read_text().splitlines(keepends=True) if "pam_nologin" not in ln)
    )
    (root / "etc/sudoers.d/010_pi-nopasswd").write_text(f"{USER} ALL=(ALL) NOPASSWD: ALL\n")
    (root / "etc/sudoers.d/010_pi-nopasswd").chmod(0o440)
    subprocess.run(
        [
            "chroot",
            str(root),
            "install",
            "-d",
            "-m",
            "0700",
            "-o",
            USER,
            "-g",
            USER,
            f"/home/{USER}/.ssh",
        ],
        check=True,
        capture_output=True,
    )
    # a container has no consoles to serve; without this, getty units fail at every boot
    for unit in (
        "getty@tty1.service",
        "console-getty.service",
        "systemd-networkd-wait-online.service",
    ):
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / "etc/hostname").write_text("lab\n")
