"""Which system a card belongs to, read from what its boot partition (and, for an image or a disk,
its root partition) carries, so that a wheelhouse that cannot run there is refused before
anything is written.

What each marker tells (pi-gen, github.com/RPi-Distro/pi-gen, and the firmware's documentation,
read 2026-12-01 and 2026-12-04):
- `issue.txt`: export-image/05-finalise copies the image's /etc/rpi-issue there, whose first
  line is "Raspberry Pi reference YYYY-MM-DD"; the date names the release, its Python and its
  glibc (fleet/targets.py).
- the kernels: 64-bit images install only linux-image-rpi-v8 and -2712, so their boot partition
  carries `kernel8.img` and `kernel_2712.img`; 32-bit images also carry `kernel.img`,
  `kernel7.img` or `kernel7l.img` for their armv6/armv7 userland.
- `config.txt`: only a Raspberry Pi's firmware reads it. `arm_64bit=1` boots the 64-bit kernel,
  which 64-bit images set; other Pi keys (`dtoverlay`, `dtparam`, `camera_auto_detect`, a `[pi4]`
  section, ...) say only that the card is a Pi's.
- `cmdline.txt` with `console=serial0`: the Pi firmware's alias for its UART.
- the firmware's own files: `start*.elf`, `fixup*.dat`, `bootcode.bin`, the `bcm27*.dtb` device
  trees and the `overlays/` folder. A Pi's, of any release and any derivative (DietPi, Ubuntu
  for Pi, a vendor's image).
- the root partition's `/usr/lib/os-release` (or `/etc/os-release`): the release by its
  `VERSION_CODENAME`, and the machine by the multiarch folder under `/usr/lib` (read with
  debugfs, without mounting; flash/rootfs.py).

A card is judged by the machine and the Python these give. Where they do not tell both, nothing
is assumed: the user names the system with `--target` (judge()).
"""

from __future__ import annotations

import fnmatch
import re

from edgegossip.errors import UsageError
from edgegossip.fleet import bundle, targets

ARM32_KERNELS = ("kernel.img", "kernel7.img", "kernel7l.img")
ARM64_KERNELS = ("kernel8.img", "kernel_2712.img")
FIRMWARE_FILES = ("start*.elf", "fixup*.dat", "bootcode.bin", "bcm27*.dtb", "overlays/*")
PI_CONFIG = re.compile(
    r"^\s*(?:arm_64bit|dtoverlay|dtparam|camera_auto_detect|display_auto_detect|auto_initramfs"
    r"|arm_boost|disable_overscan|enable_uart|gpu_mem|start_x|otg_mode)\s*=|"
    r"^\s*\[(?:pi\w*|cm\w*|board-type=\w+)\]",
    re.MULTILINE,
)
_ARM64_CONFIG = re.compile(r"^\s*arm_64bit\s*=\s*1\s*$", re.MULTILINE)
_SERIAL0 = re.compile(r"(?:^|\s)console=serial0(?:[,\s]|$)")
_ISSUE = re.compile(r"Raspberry Pi reference (\d{4}-\d{2}-\d{2})")
TEXT_FILES = ("issue.txt", "config.txt", "cmdline.txt")
THIS_MACHINE = "this-machine"
TARGET_NAMES = (*targets.TARGETS, THIS_MACHINE)
ARM = ("aarch64", "armv7l", "armv6l")
LOOKED_FOR = (
    "issue.txt, kernel*.img, config.txt's Pi keys, console=serial0 in cmdline.txt, overlays/, "
    "bcm27*.dtb, start*.elf, fixup*.dat"
)


class CardMismatch(UsageError, ValueError):
    """The wheelhouse cannot run on the system of the card (exit 2, nothing written)."""


def read(names: list[str], text: dict[str, str], root: dict | None = None) -> dict:
    """{"os", "date", "machine", "python", "glibc", "raspberry_pi", "markers"} of a card: `names`
    the boot partition's files, `text` the contents of its issue.txt, config.txt and cmdline.txt
    (missing ones empty), `root` what rootfs.read() found on its root partition, if anything. A
    field is None where no marker tells it; markers lists the ones found."""
    markers = _pi_markers(names, text)
    date = m.group(1) if (m := _ISSUE.search(text.get("issue.txt", ""))) else None
    if date:
        markers.insert(0, "issue.txt")
    release = targets.release_of(date) if date else None
    machine = _boot_machine(set(names), text.get("config.txt", ""))
    os_name = f"Raspberry Pi OS {release.name}" if release else None
    if root:
        markers.append("root os-release")
        machine = root.get("machine") or machine
        release = targets.RELEASES_BY_NAME.get(root.get("codename") or "") or release
        os_name = root.get("os") or os_name
    return {
        "os": os_name,
        "date": date,
        "machine": machine,
        "python": release.python if release else None,
        "glibc": release.glibc if release else None,
        "raspberry_pi": bool(markers),
        "markers": markers,
    }


def _pi_markers(names: list[str], text: dict[str, str]) -> list[str]:
    have = set(names)
    found = [k for k in (*ARM64_KERNELS, *ARM32_KERNELS) if k in have]
    for pattern in FIRMWARE_FILES:
        if any(fnmatch.fnmatch(n, pattern) for n in names):
            found.append(pattern)
    if PI_CONFIG.search(text.get("config.txt", "")):
        found.append("config.txt")
    if _SERIAL0.search(text.get("cmdline.txt", "")):
        found.append("console=serial0")
    return found


def _boot_machine(have: set[str], config: str) -> str | None:
    if have & set(ARM32_KERNELS):
        return "armv7l"
    if have & set(ARM64_KERNELS) or _ARM64_CONFIG.search(config):
        return "aarch64"
    return None


def judge(card: dict, wheels: dict, target: str | None) -> dict:
    """The system the wheelhouse is checked against, or CardMismatch: the card's own when its
    markers tell machine and Python, else the named target's, which the markers must not
    contradict. A Pi's card is never given another machine's wheels."""
    if target is not None:
        system = _target_platform(target)
        _check_target(card, system, target)
    elif card["machine"] and card["python"]:
        system = card
    elif card["raspberry_pi"] and wheels.get("machine") not in ARM:
        raise CardMismatch(
            f"the card is a Raspberry Pi's ({', '.join(card['markers'])}); the wheelhouse is for "
            f"{bundle.describe(wheels)}: build one with `edgegossip fleet wheelhouse --for "
            f"TARGET --out DIR` ({', '.join(targets.TARGETS)})"
        )
    else:
        found = ", ".join(card["markers"]) or "none"
        unknown = " and ".join(
            k for k, v in (("machine", "machine"), ("Python", "python")) if not card[v]
        )
        raise CardMismatch(
            f"cannot tell the card's {unknown} (looked for {LOOKED_FOR}, an image's "
            f"os-release; found: {found}): name it with --target {'|'.join(TARGET_NAMES)}"
        )
    if bundle.misfits(system, wheels):
        raise CardMismatch(
            f"the card is {system.get('os') or target or 'Raspberry Pi OS'} "
            f"({bundle.describe(system)}); the wheelhouse is for {bundle.describe(wheels)}: "
            f"build one with {targets.build_hint(system)} and flash with --wheelhouse DIR"
        )
    return system


def _target_platform(target: str) -> dict:
    if target == THIS_MACHINE:
        return {"os": "this machine's system", **bundle.this_platform()}
    t = targets.TARGETS[target]
    return {"os": t.describe(), **t.platform()}


def _check_target(card: dict, system: dict, target: str) -> None:
    said = [k for k in ("machine", "python") if card[k] and card[k] != system[k]]
    if card["raspberry_pi"] and system["machine"] not in ARM:
        said = said or ["machine"]
    if said:
        raise CardMismatch(
            f"--target {target} is {bundle.describe(system)}, but the card says "
            f"{bundle.describe(card) if card['machine'] else 'a Raspberry Pi'} "
            f"({', '.join(card['markers'])})"
        )
