"""Which system a Raspberry Pi OS boot partition belongs to, read from what pi-gen leaves on it,
so that a wheelhouse that cannot run there is refused before anything is written.

The markers (pi-gen, github.com/RPi-Distro/pi-gen, read 2026-12-01):
- `issue.txt`: export-image/05-finalise copies the image's /etc/rpi-issue there, whose first
  line is "Raspberry Pi reference YYYY-MM-DD" (scripts/common, update_issue); the date names
  the release, its Python and its glibc (fleet/targets.py: Trixie from 2025-10-01, Bookworm
  from 2023-10-10).
- the kernels: 64-bit images (the arm64 branches) install only linux-image-rpi-v8 and -2712, so
  their boot partition carries `kernel8.img` and `kernel_2712.img`; 32-bit images (armhf) also
  carry `kernel.img`, `kernel7.img` or `kernel7l.img` for their armv6/armv7 userland.
A partition with neither marker (a boot folder made by hand, a lab device) is not read as a
Raspberry Pi OS card, and nothing is assumed about it.
"""

from __future__ import annotations

import re

from edgegossip.errors import UsageError
from edgegossip.fleet import bundle, targets

ARM32_KERNELS = ("kernel.img", "kernel7.img", "kernel7l.img")
ARM64_KERNELS = ("kernel8.img", "kernel_2712.img")
_ISSUE = re.compile(r"Raspberry Pi reference (\d{4}-\d{2}-\d{2})")


class CardMismatch(UsageError, ValueError):
    """The wheelhouse cannot run on the system of the card (exit 2, nothing written)."""


def read(names: list[str], issue: str) -> dict:
    """{"os", "date", "machine", "python", "glibc"} of the card; a field is None where its
    marker is missing."""
    have = set(names)
    machine = None
    if have & set(ARM32_KERNELS):
        machine = "armv7l"
    elif have & set(ARM64_KERNELS):
        machine = "aarch64"
    m = _ISSUE.search(issue)
    date = m.group(1) if m else None
    release = targets.release_of(date) if date is not None else None
    return {
        "os": f"Raspberry Pi OS {release.name}" if release else None,
        "date": date,
        "machine": machine,
        "python": release.python if release else None,
        "glibc": release.glibc if release else None,
    }


def check(card: dict, platform: dict) -> None:
    """Refuse a wheelhouse for another machine, another Python or a newer glibc than the
    card's."""
    if not bundle.misfits(card, platform):
        return
    raise CardMismatch(
        f"the card is {card['os'] or 'Raspberry Pi OS'} ({bundle.describe(card)}); the "
        f"wheelhouse is for {bundle.describe(platform)}: build one with "
        f"{targets.build_hint(card)} and flash with --wheelhouse DIR"
    )
