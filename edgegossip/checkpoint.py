"""Atomic checkpoints: write a temporary file, fsync it, rename it over the old one, fsync the
directory. A kill -9 at any instant leaves either the previous checkpoint or the new one; the
temporary file of a save cut short is removed at the next start (clean()).

The agent's session (incarnation) number lives beside it in a file of its own, written the same
way before the agent sends anything, so every start of an agent gets a larger one."""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

NAME = "checkpoint.npz"
SESSION = "session"
_TMP_PREFIX = ".ckpt-"


def _atomic_write(path: Path, write: Callable) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(path.parent, os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _write_npz(f, arrays: dict[str, np.ndarray]) -> None:
    """The file np.savez writes (an uncompressed zip of .npy members), without its copy: savez
    hands a zip member each array as one bytes object, a transient copy of the model (11.6 MB
    of peak memory for the MLP); here the zip writer reads the array's own memory."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, value in arrays.items():
            a = np.asarray(value)
            a = a if a.flags.c_contiguous else np.ascontiguousarray(a)  # (this one keeps 0-d)
            with z.open(name + ".npy", "w", force_zip64=a.nbytes > 2**30) as m:
                np.lib.format.write_array_header_1_0(m, np.lib.format.header_data_from_array_1_0(a))
                if a.nbytes:
                    m.write(memoryview(a.reshape(-1)).cast("B"))


def save(directory: str | Path, **arrays) -> Path:
    return _atomic_write(Path(directory) / NAME, lambda f: _write_npz(f, arrays))


def load(directory: str | Path) -> dict[str, np.ndarray] | None:
    path = Path(directory) / NAME
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def clean(directory: str | Path) -> int:
    """Remove temporary files of saves that a kill or power loss cut short; how many."""
    d = Path(directory)
    if not d.is_dir():
        return 0
    stale = list(d.glob(f"{_TMP_PREFIX}*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def next_session(directory: str | Path) -> int:
    """The session number for this start: one more than any start before it, persisted (and
    fsynced) before it is returned. Not the clock: a board without an RTC boots in the past."""
    path = Path(directory) / SESSION
    try:
        last = int(path.read_text().strip() or 0)
    except FileNotFoundError:
        last = 0
    except ValueError:
        raise ValueError(
            f"{path}: not a session number; remove it only if this device's keys are replaced too"
        ) from None
    session = last + 1
    if session >= 2**32:
        raise ValueError(f"{path}: session numbers exhausted")
    _atomic_write(path, lambda f: f.write(f"{session}\n".encode()))
    return session
