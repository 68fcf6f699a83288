"""Atomic checkpoints: write a temporary file, fsync it, rename it over the old one, fsync the
directory. A kill -9 at any instant leaves either the previous checkpoint or the new one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

NAME = "checkpoint.npz"


def save(directory: str | Path, **arrays) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".ckpt-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / NAME)
        dfd = os.open(d, os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return d / NAME


def load(directory: str | Path) -> dict[str, np.ndarray] | None:
    path = Path(directory) / NAME
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {k: z[k] for k in z.files}
