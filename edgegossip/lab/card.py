"""A lab device booted from a flashed card, as a fresh Raspberry Pi boots (`lab boot DIR NAME
--card BOOT`).

The device's lab container is powered off and the device comes back as a new Pi of its
release: its own copy of the lab root (kept across reboots, as an SD card's root partition is),
with nothing of the lab in it (no authorised key, no sudo rule, no SSH host key, hostname
`raspberrypi`; on Bookworm only the image's locked first user, on Trixie no user), timesyncd
running as on a Pi, the card's boot folder mounted at /boot/firmware where Raspberry Pi OS
mounts it, and the card's cmdline.txt as the kernel command line (the words go to the container's
init, which is where cloud-init's ds-identify and systemd read /proc/cmdline's words in a
container). Whatever the first boot does (cloud-init with the NoCloud seed on Trixie,
firstrun.sh through systemd.run= on Bookworm) it does from those files alone.

FAT keeps no mode bits: Raspberry Pi OS mounts the boot partition with fstab's `defaults`, so
every file there reads as root's with mode 0755, and systemd.run= executes firstrun.sh as it
is. The card's folder is given those modes before each boot (`as_fat`), or the lab would
refuse what a Pi runs.

A reboot from inside (`sudo reboot`, firstrun.sh's own) ends the container with exit status
133; the supervising shell boots it again from the same root and card, with cmdline.txt read
afresh (firstrun.sh takes its own words out of it), so the device reboots as a Pi does.
`lab down` powers it off for good."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from edgegossip.lab import root as lab_root

REBOOTED = 133  # systemd-nspawn's exit status when the container's init rebooted
FRESH_HOSTNAME = "raspberrypi"  # what Raspberry Pi OS images are called before first boot
# Raspberry Pi OS images carry no SSH host keys: raspberrypi-sys-mods' regenerate_ssh_host_keys
# makes them at first boot, before sshd (a flashed card's own key then replaces one)
HOST_KEYS_UNIT = """\
[Unit]
Description=SSH host keys of a fresh device
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
[Install]
WantedBy=multi-user.target
"""
# pi-gen's first user on Bookworm images: `pi`, uid 1000, no password, in these groups
# (stage2/01-sys-tweaks/01-run.sh); Imager's firstrun.sh renames it to the flashed user and the
# groups stay. Trixie's cloud-init makes its user from cloud.cfg's default_user instead.
IMAGE_GROUPS = (
    "adm dialout cdrom audio users sudo video games plugdev input gpio spi i2c netdev render"
).split()


def _chroot(root: Path, *argv: str) -> None:
    # under qemu-user where the root is another CPU's: seconds
    subprocess.run(["chroot", str(root), *argv], check=True, capture_output=True)


def fresh_root(root: Path, dest: Path, os_name: str) -> Path:
    """dest: a copy of the lab root with the lab's own provisioning taken out, made once; on
    Bookworm its user is left as the image's first user."""
    if (dest / ".edgegossip-fresh").is_file():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(root), str(partial)], check=True)
    for f in (
        f"etc/sudoers.d/010_{lab_root.USER}-nopasswd",
        "etc/ssh/sshd_config.d/lab.conf",
        ".edgegossip-lab-ready",
    ):
        (partial / f).unlink(missing_ok=True)
    if os_name == "bookworm":
        for g in IMAGE_GROUPS:
            _chroot(partial, "groupadd", "-f", "-r", g)
        _chroot(partial, "usermod", "--pass=*", "-G", ",".join(IMAGE_GROUPS), lab_root.USER)
        shutil.rmtree(partial / f"home/{lab_root.USER}/.ssh", ignore_errors=True)
    else:
        _chroot(partial, "userdel", "--remove", lab_root.USER)
    units = partial / "etc/systemd/system"
    (units / "regenerate-ssh-host-keys.service").write_text(HOST_KEYS_UNIT)
    (units / "multi-user.target.wants").mkdir(exist_ok=True)
    (units / "multi-user.target.wants/regenerate-ssh-host-keys.service").symlink_to(
        "/etc/systemd/system/regenerate-ssh-host-keys.service"
    )
    timesyncd = units / "systemd-timesyncd.service.d"
    timesyncd.mkdir(exist_ok=True)
    (timesyncd / "10-lab.conf").write_text(lab_root.TIMESYNCD_DROPIN)
    (partial / "etc/hostname").write_text(f"{FRESH_HOSTNAME}\n")
    (partial / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {FRESH_HOSTNAME}\n")
    (partial / ".edgegossip-fresh").touch()
    partial.rename(dest)
    return dest


def as_fat(card: Path) -> None:
    """The card's files and folders as Raspberry Pi OS's vfat mount shows them: 0755, root's."""
    for p in (card, *card.rglob("*")):
        if not p.is_symlink():
            os.chown(p, 0, 0)
            p.chmod(0o755)


def argv(
    device_root: Path,
    name: str,
    netns: str,
    card: Path,
    incoming: Path | None,
    spec: lab_root.Spec,
) -> list[str]:
    """The supervising shell and the nspawn it restarts after each reboot."""
    nspawn = [
        "systemd-nspawn",
        "-D",
        str(device_root),
        "--boot",
        "--register=no",
        "--keep-unit",
        "-M",
        name,
        "--console=pipe",
        f"--network-namespace-path=/run/netns/{netns}",
        f"--bind={card}:/boot/firmware",
    ]
    if incoming is not None:
        nspawn.append(f"--bind={incoming}:/run/systemd/incoming")
    nspawn += [f"--setenv={k}={v}" for k, v in spec.qemu_env().items()]
    # the kernel command line's words, split as the kernel splits them (no globbing)
    loop = (
        'c=$1; shift; set -f; while :; do "$@" $(cat "$c/cmdline.txt" 2>/dev/null); s=$?; '
        f'[ "$s" = {REBOOTED} ] || exit "$s"; done'
    )
    return ["sh", "-c", loop, "lab-card", str(card), *nspawn]
