"""Whether a block device may be written: a removable disk (an SD card reader) with none of its
partitions mounted as part of the running system."""

from __future__ import annotations

import os
from pathlib import Path

from edgegossip.errors import UsageError

SYSTEM_MOUNTS = ("/", "/boot", "/boot/efi", "/boot/firmware", "/usr", "/var", "/home", "/etc")


class DiskError(UsageError, ValueError):
    pass


def check(device: str, sys_root: Path = Path("/sys"), mounts: str | None = None) -> None:
    real = os.path.realpath(device)
    name = Path(real).name
    block = sys_root / "block" / name
    if not block.is_dir():
        raise DiskError(
            f"{device}: not a whole disk (give the disk, e.g. /dev/sdb, not a partition)"
        )
    if (block / "removable").read_text().strip() != "1":
        raise DiskError(f"{device}: not a removable disk; refusing to write to it")
    parts = {name} | {p.name for p in block.iterdir() if p.name.startswith(name)}
    if mounts is None:
        mounts = Path("/proc/mounts").read_text()
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 2 and Path(fields[0]).name in parts:
            if fields[1] in SYSTEM_MOUNTS:
                raise DiskError(
                    f"{device}: {fields[0]} is mounted at {fields[1]}, part of the running "
                    "system; refusing to write to it"
                )
            raise DiskError(
                f"{device}: {fields[0]} is mounted at {fields[1]}; unmount it, or give "
                f"--boot {fields[1]}"
            )
