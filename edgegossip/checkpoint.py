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

from edgegossip.errors import EdgegossipError

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


MAX_ARRAY_BYTES = 1 << 30  # no model this project trains comes near it


class CheckpointError(EdgegossipError, ValueError):
    pass


def load(directory: str | Path) -> dict[str, np.ndarray] | None:
    """The arrays of the checkpoint in directory, None if there is none. A checkpoint may come
    from a device the operator does not trust (`fleet collect`): it must be what save() writes,
    an uncompressed zip of plain numeric .npy members, and each member's header must agree
    with its size before anything of that size is allocated (np.load would inflate a deflated
    member of any declared size)."""
    path = Path(directory) / NAME
    if not path.is_file():
        return None
    out: dict[str, np.ndarray] = {}
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                name = info.filename
                if not name.endswith(".npy") or info.compress_type != zipfile.ZIP_STORED:
                    raise CheckpointError(f"{path}: member {name!r} is not a stored .npy")
                if info.file_size > MAX_ARRAY_BYTES + 4096:
                    raise CheckpointError(f"{path}: member {name!r} is too large")
                with z.open(info) as m:
                    version = np.lib.format.read_magic(m)
                    if version != (1, 0):
                        raise CheckpointError(f"{path}: member {name!r} has npy version {version}")
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(m)
                    if dtype.hasobject or dtype.kind not in "biuf" or fortran:
                        raise CheckpointError(f"{path}: member {name!r} is not a numeric array")
                    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                    if nbytes != info.file_size - m.tell():
                        raise CheckpointError(f"{path}: member {name!r} has the wrong size")
                    a = np.empty(shape, dtype)
                    view = memoryview(a.reshape(-1)).cast("B")
                    if nbytes and m.readinto(view) != nbytes:  # type: ignore[attr-defined]
                        raise CheckpointError(f"{path}: member {name!r} is truncated")
                out[name[: -len(".npy")]] = a
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise CheckpointError(f"{path}: not a checkpoint ({e})") from None
    except ValueError as e:  # a malformed npy header
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: not a checkpoint ({e})") from None
    return out


DIGEST = "model_digest"  # the member naming the compiled model that trained it


def digest_array(digest: str | None) -> dict[str, np.ndarray]:
    """The member that records a compiled model's artifact digest (none for a named model)."""
    return {} if digest is None else {DIGEST: np.frombuffer(digest.encode(), np.uint8).copy()}


def digest_of(state: dict[str, np.ndarray]) -> str | None:
    """The artifact digest a checkpoint records (None: a named model's, or none recorded)."""
    a = state.get(DIGEST)
    if a is None or a.dtype != np.uint8 or a.ndim != 1 or a.size > 128:
        return None
    return bytes(a).decode("ascii", errors="replace")


def check_model(state: dict[str, np.ndarray], digest: str | None) -> None:
    """CheckpointError unless the checkpoint was trained by the model of this digest (None:
    a named model). Layouts can agree where models do not: the digest is what tells."""
    got = digest_of(state)
    if got != digest:
        what = f"model {got[:12]}" if got else "a named model (no digest)"
        want = f"model {digest[:12]}" if digest else "a named model"
        raise CheckpointError(f"the checkpoint was trained by {what}, not {want}")


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
