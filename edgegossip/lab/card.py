"""A lab device booted from a flashed card, as a fresh Raspberry Pi boots (`lab boot DIR NAME
--card BOOT`).

The device's lab container is powered off and the device comes back as a new Pi of its
release: its own copy of the lab root (kept across reboots, as an SD card's root partition is),
with nothing of the lab in it (no user, no authorised key, no SSH host key, hostname
`raspberrypi`), the card's boot folder mounted at /boot/firmware where Raspberry Pi OS mounts
it, and the card's cmdline.txt as the kernel command line (the words go to the container's
init, which is where cloud-init's ds-identify and systemd read /proc/cmdline's words in a
container). Whatever the first boot does (cloud-init with the NoCloud seed on Trixie,
firstrun.sh through systemd.run= on Bookworm) it does from those files alone.

A reboot from inside (`sudo reboot`, firstrun.sh's own) ends the container with exit status
133; the supervising shell boots it again from the same root and card, so the device reboots as
a Pi does. `lab down` powers it off for good."""

from __future__ import annotations

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


def fresh_root(root: Path, dest: Path) -> Path:
    """dest: a copy of the lab root with the lab's own provisioning taken out, made once."""
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
    subprocess.run(  # under qemu-user where the root is another CPU's: seconds
        ["chroot", str(partial), "userdel", "--remove", lab_root.USER],
        check=True,
        capture_output=True,
    )
    units = partial / "etc/systemd/system"
    (units / "regenerate-ssh-host-keys.service").write_text(HOST_KEYS_UNIT)
    (units / "multi-user.target.wants").mkdir(exist_ok=True)
    (units / "multi-user.target.wants/regenerate-ssh-host-keys.service").symlink_to(
        "/etc/systemd/system/regenerate-ssh-host-keys.service"
    )
    (partial / "etc/hostname").write_text(f"{FRESH_HOSTNAME}\n")
    (partial / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {FRESH_HOSTNAME}\n")
    (partial / ".edgegossip-fresh").touch()
    partial.rename(dest)
    return dest


def kernel_words(card: Path) -> list[str]:
    try:
        return (card / "cmdline.txt").read_text().split()
    except OSError:
        return []


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
    loop = f'while :; do "$@"; s=$?; [ "$s" = {REBOOTED} ] || exit "$s"; done'
    return ["sh", "-c", loop, "systemd-nspawn", *nspawn, *kernel_words(card)]
