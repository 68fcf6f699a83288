"""The boot partition as a small file store: a mounted folder, or the FAT file system inside an
image or on a disk, edited in place without root and without mounting.

FAT through mtools (Debian package `mtools`): it is the maintained FAT implementation every
distribution ships, it works on a byte offset into an image or a block device (`-i FILE@@OFFSET`),
needs no root, no loop device and no kernel FAT driver, and adds no Python dependency. A Python
FAT library would have to be vendored or pulled from PyPI for one command."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from edgegossip import tools
from edgegossip.errors import EdgegossipError
from edgegossip.flash import rootfs
from edgegossip.flash.partitions import boot_partition


class BootError(EdgegossipError, RuntimeError):
    pass


class DirBoot:
    """A mounted boot partition (e.g. /media/USER/bootfs)."""

    def __init__(self, root: Path):
        if not (root / "cmdline.txt").is_file():
            raise BootError(f"{root}: no cmdline.txt here; is this a Raspberry Pi boot partition?")
        self.root = root
        self.label = str(root)

    def read(self, name: str) -> bytes | None:
        p = self.root / name
        return p.read_bytes() if p.is_file() else None

    def write(self, name: str, data: bytes | Path) -> None:
        dest = self.root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        if isinstance(data, Path):
            shutil.copyfile(data, tmp)
        else:
            tmp.write_bytes(data)
        os.replace(tmp, dest)

    def names(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def root_system(self) -> dict | None:
        """A mounted boot partition comes without its root partition."""
        return None


class FatBoot:
    """The FAT boot partition of an image file or a disk, through mtools."""

    def __init__(self, path: Path):
        tools.require("mcopy", why="editing the image's FAT partition without mounting it")
        try:
            part = boot_partition(str(path))
        except OSError as e:
            raise BootError(f"{path}: {e.strerror}") from None
        self.path = str(path)
        self.target = f"{path}@@{part.start}"
        self.label = f"{path} (partition {part.number})"
        self.env = {**os.environ, "MTOOLS_SKIP_CHECK": "1", "MTOOLS_NO_VFAT": "0"}
        if self.read("cmdline.txt") is None:
            raise BootError(
                f"{path}: no cmdline.txt on its FAT partition; not a Raspberry Pi image?"
            )

    def _m(
        self, *args: str, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess:
        p = subprocess.run(args, capture_output=True, env=self.env, input=input)
        if check and p.returncode != 0:
            raise BootError(
                f"{args[0]}: {p.stderr.decode(errors='replace').strip().splitlines()[-1:]}"
            )
        return p

    def read(self, name: str) -> bytes | None:
        p = self._m("mtype", "-i", self.target, f"::/{name}", check=False)
        return p.stdout if p.returncode == 0 else None

    def write(self, name: str, data: bytes | Path) -> None:
        parts = name.split("/")
        for k in range(1, len(parts)):
            self._m("mmd", "-D", "s", "-i", self.target, "::/" + "/".join(parts[:k]), check=False)
        if isinstance(data, Path):
            self._m("mcopy", "-o", "-i", self.target, str(data), f"::/{name}")
            return
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            self._m("mcopy", "-o", "-i", self.target, f.name, f"::/{name}")

    def root_system(self) -> dict | None:
        """What the image's or disk's own root partition says of its system (rootfs.py)."""
        return rootfs.read(self.path)

    def names(self) -> list[str]:
        p = self._m("mdir", "-/", "-b", "-i", self.target, "::/")
        prefix = "::/"
        return sorted(
            line[len(prefix) :]
            for line in p.stdout.decode().splitlines()
            if line.startswith(prefix) and not line.endswith("/")
        )
