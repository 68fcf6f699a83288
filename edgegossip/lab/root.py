"""The Debian roots that lab devices boot read-only (each under its own throw-away overlay): one
per Raspberry Pi OS release and architecture (`lab up --os RELEASE --arch ARCH`). Built once with
debootstrap from the machine's own Debian mirror and cached (bookworm amd64: about 2.5 minutes
and 330 MB; an arm64 root runs its package scripts under qemu-user, through binfmt_misc, and
takes longer). A root holds what Raspberry Pi OS Lite holds that deploy relies on (systemd,
sshd, python3 with venv, OpenSSL's libcrypto) and nothing of edgegossip: deploy must bring that.

An arm64 root boots under systemd-nspawn like a native one: binfmt_misc's qemu-aarch64 entry is
registered with the F flag (Debian's qemu-user-static does so), so the kernel holds the
interpreter open and the container needs no copy of it. Everything the device runs, systemd
included, is then aarch64 code under emulation: the same Python, glibc and wheels as a Pi of
that release, at a fraction of a Pi's speed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from edgegossip import paths, tools
from edgegossip.errors import EdgegossipError
from edgegossip.fleet.targets import QEMU_CPU, RELEASES

COMMON = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "iproute2",
    "procps",
    "sudo",
    "nftables",
)
# Debian 13 renamed OpenSSL's library package in the 64-bit time_t transition
LIBSSL = {"bookworm": "libssl3", "trixie": "libssl3t64"}
# what that release's Raspberry Pi OS boots with beside: both keep time with systemd-timesyncd
# (a Pi has no real-time clock), and Trixie images provision themselves with cloud-init.
# debootstrap does not resolve virtual packages: python3-cryptography's
# python3-cffi-backend-api-* is named
FIRST_BOOT = {
    "bookworm": ("systemd-timesyncd",),
    "trixie": ("cloud-init", "python3-cffi-backend", "systemd-timesyncd"),
}
OSES = tuple(r.name for r in RELEASES if r.name in LIBSSL)
ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}  # debootstrap's name: the machine's
USER = "pi"  # as on Raspberry Pi OS: a login user with passwordless sudo, not root


def host_arch() -> str:
    return next((a for a, m in ARCHES.items() if m == platform.machine()), "amd64")


@dataclass(frozen=True)
class Spec:
    """One lab root: a Debian release on an architecture."""

    os: str = "bookworm"
    arch: str = ""  # empty: this machine's

    @property
    def debian_arch(self) -> str:
        return self.arch or host_arch()

    @property
    def machine(self) -> str:
        return ARCHES[self.debian_arch]

    @property
    def emulated(self) -> bool:
        return self.machine != platform.machine()

    @property
    def name(self) -> str:
        return f"{self.os}-{self.debian_arch}"

    def qemu_env(self) -> dict[str, str]:
        """What every process of an emulated device needs in its environment (targets.QEMU_CPU)."""
        return {"QEMU_CPU": QEMU_CPU[self.machine]} if self.emulated else {}

    def packages(self) -> tuple[str, ...]:
        return (*COMMON, LIBSSL[self.os], *FIRST_BOOT[self.os])


DEFAULT = Spec()  # Raspberry Pi OS Bookworm on this machine's architecture


class RootError(EdgegossipError, RuntimeError):
    pass


def default_cache() -> Path:
    env = os.environ.get("EDGEGOSSIP_LAB_CACHE")
    if env:
        return Path(env)
    return paths.cache_dir() / "lab"


mirror = tools.debian_mirror  # the lab roots come from the mirror apt already uses


CONFIGURED = 4  # bump when _configure changes: a cached root is then built afresh


def _stamp(spec: Spec) -> str:
    words = (spec.os, spec.debian_arch, *spec.packages(), str(CONFIGURED))
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:12]


def path(spec: Spec = DEFAULT, cache: Path | None = None) -> Path:
    return (cache or default_cache()) / f"root-{spec.name}-{_stamp(spec)}"


def ensure(spec: Spec = DEFAULT, cache: Path | None = None, progress=print) -> Path:
    """The cached root, built first if missing (an interrupted build is started over)."""
    root = path(spec, cache)
    if (root / ".edgegossip-lab-ready").is_file():
        return root
    tools.require("debootstrap", "systemd-nspawn", why="the lab's Debian root")
    if spec.emulated:
        tools.require(
            f"qemu-{spec.machine}-static", "update-binfmts", why=f"a {spec.name} lab root"
        )
        _check_qemu(spec)
        tools.enable_binfmt(spec.machine)
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    took = "minutes under emulation" if spec.emulated else "about 2.5 minutes"
    progress(f"building the lab's Debian {spec.name} root in {root} (once; {took})")
    p = subprocess.run(
        [
            "debootstrap",
            f"--arch={spec.debian_arch}",
            "--variant=minbase",
            f"--include={','.join(spec.packages())}",
            spec.os,
            str(partial),
            mirror(),
        ],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:]
        raise RootError(f"debootstrap failed: {tail[0] if tail else p.returncode}")
    _configure(partial, spec)
    (partial / ".edgegossip-lab-ready").touch()
    partial.rename(root)
    return root


QEMU_MIN = 10  # Debian 12's 7.2 cannot start systemd-executor (no execveat); 10.0 can


def _check_qemu(spec: Spec) -> None:
    qemu = f"qemu-{spec.machine}-static"
    out = subprocess.run([qemu, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"version (\d+)\.", out)
    if not m or int(m.group(1)) < QEMU_MIN:
        raise RootError(
            f"{qemu} {m.group(1) if m else '?'}.x cannot boot a {spec.name} lab device (systemd "
            f"needs qemu {QEMU_MIN} or later): bash scripts/system-packages.sh install test "
            "(on Debian 12 it takes qemu-user-static from bookworm-backports)"
        )


# what qemu-user does not emulate, for the emulated roots only: the credentials systemd mounts
# for a service (a failed mount stops journald, logind, tmpfiles with 243/CREDENTIALS; none of
# these roots' services needs one), and a user namespace (the agent's PrivateUsers=yes fails
# with 217/USER). Seccomp is not emulated either: systemd finds it missing and skips the
# unit's system call filters by itself. The agent's hardening is rated on native lab devices.
EMULATION_DROPIN = (
    "[Service]\nImportCredential=\nLoadCredential=\nSetCredential=\nPrivateUsers=no\n"
)


# Raspberry Pi OS's own cloud-init settings (pi-gen stage2/04-cloud-init/files/99_raspberry-pi.cfg,
# since 2025-11 in the package rpi-cloud-init-mods; read 2026-12-01): the NoCloud seed is the
# boot partition, and cloud-init neither deletes nor makes SSH host keys (the OS makes them; a
# flashed card brings its own). Its netplan-to-NetworkManager rendering is not reproduced: a lab
# device's address is set from outside its namespace, with no DHCP server to hand one out.
RPI_CLOUD_CFG = """\
datasource_list: [ NoCloud, None ]
datasource:
  NoCloud:
    seedfrom: file:///boot/firmware
ssh_deletekeys: false
ssh_genkeytypes: []
"""
# timesyncd skips containers (ConditionVirtualization=!container), so a lab device's clock is
# `unknown` and its agent does not wait for it. A device booted from a card is the Pi
# (card.fresh_root): there it runs, and with no time server reachable keeps the clock
# unsynchronised, as on an offline LAN
TIMESYNCD_DROPIN = "[Unit]\nConditionVirtualization=\n"


def _configure_emulation(root: Path, spec: Spec) -> None:
    """An arm64 root run under qemu-user: the emulated core for every service and login."""
    (root / "etc/systemd/system/service.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/system/service.d/10-qemu-user.conf").write_text(EMULATION_DROPIN)
    # the emulated core, for services (the manager's) and logins (pam_env); nspawn gives it
    # to init (machines.py)
    env = "".join(f"{k}={v}\n" for k, v in spec.qemu_env().items())
    (root / "etc/systemd/system.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/system.conf.d/10-qemu-cpu.conf").write_text(
        f"[Manager]\nDefaultEnvironment={env.strip()}\n"
    )
    with open(root / "etc/environment", "a") as f:
        f.write(env)


def _add_user(root: Path) -> None:
    """The lab's login user, with sudo and a .ssh folder, and sshd letting it in at once."""
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


def _configure(root: Path, spec: Spec) -> None:
    if "cloud-init" in spec.packages():
        (root / "etc/cloud/cloud.cfg.d/99_raspberry-pi.cfg").write_text(RPI_CLOUD_CFG)
    if spec.emulated:
        _configure_emulation(root, spec)
    # host keys are per device (bound in at boot); the root's own would make every device the same
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (root / "etc/ssh/sshd_config.d/lab.conf").write_text(
        "HostKey /etc/ssh/lab/ssh_host_ed25519_key\nPasswordAuthentication no\nPermitRootLogin no\n"
    )
    _add_user(root)
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
