"""The MBR partition table of a Raspberry Pi OS image or SD card: the first FAT partition is the
boot partition (firmware, kernel, config.txt, cmdline.txt)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from edgegossip.errors import UsageError

SECTOR = 512
FAT_TYPES = {0x01, 0x04, 0x06, 0x0B, 0x0C, 0x0E}
LINUX = 0x83


class PartitionError(UsageError, ValueError):
    pass


@dataclass(frozen=True)
class Partition:
    number: int
    type: int
    start: int  # bytes from the start of the disk
    size: int  # bytes


def read_mbr(head: bytes) -> list[Partition]:
    if len(head) < SECTOR or head[510:512] != b"\x55\xaa":
        raise PartitionError("no MBR partition table (not a Raspberry Pi OS image?)")
    parts = []
    for n in range(4):
        entry = head[446 + 16 * n : 446 + 16 * (n + 1)]
        ptype = entry[4]
        start, count = struct.unpack_from("<II", entry, 8)
        if ptype == 0xEE:
            raise PartitionError(
                "GPT disk: Raspberry Pi OS images use MBR; give --boot DIR instead"
            )
        if ptype and count:
            parts.append(Partition(n + 1, ptype, start * SECTOR, count * SECTOR))
    return parts


def boot_partition(path: str) -> Partition:
    with open(path, "rb") as f:
        head = f.read(SECTOR)
        f.seek(0, 2)
        end = f.tell()
    fats = [p for p in read_mbr(head) if p.type in FAT_TYPES]
    if not fats:
        raise PartitionError(f"{path}: no FAT partition in its partition table")
    p = fats[0]
    if end and p.start + p.size > end:
        raise PartitionError(
            f"{path}: the boot partition runs past the end of the image (truncated?)"
        )
    return p


def mbr(partitions: list[tuple[int, int, int]]) -> bytes:
    """An MBR sector with (type, start sector, sectors) entries: for building test images."""
    sector = bytearray(SECTOR)
    for n, (ptype, start, count) in enumerate(partitions):
        entry = bytearray(16)
        entry[4] = ptype
        struct.pack_into("<II", entry, 8, start, count)
        sector[446 + 16 * n : 446 + 16 * (n + 1)] = entry
    sector[510:512] = b"\x55\xaa"
    return bytes(sector)
