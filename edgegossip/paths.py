"""Where edgegossip keeps things on the machine it runs on: its cache (XDG, never the source
tree: a pip-installed edgegossip has none) and the device files it ships (profiles, the unit,
the first-boot template), packaged into the wheel by setup.py and read from devices/ in a
source checkout."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """$EDGEGOSSIP_CACHE, else $XDG_CACHE_HOME/edgegossip, else ~/.cache/edgegossip."""
    base = os.environ.get("EDGEGOSSIP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "edgegossip"
    )
    return Path(base)


def devices_dir() -> Path:
    """The device files: edgegossip/devices in a wheel, devices/ beside the package otherwise."""
    packaged = _HERE / "devices"
    return packaged if packaged.is_dir() else _HERE.parent / "devices"


def source_tree() -> Path | None:
    """The source checkout this edgegossip runs from (an editable install), or None."""
    root = _HERE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "native").is_dir() else None


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, hex, read a megabyte at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_regular(path: str | Path, limit: int) -> bytes:
    """A regular file's bytes, at most limit of them; OSError for anything else. Opened
    without blocking, so a FIFO or a device in the file's place (a reload's agent.toml swapped
    for /dev/zero or a pipe) is refused at once instead of holding the reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than {limit}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"more than {limit} bytes")
    return data
