"""`edgegossip data split`: one data file per device, so each device only ever holds its own.

Device i gets its training shard (train.partition's rule, the seed's 51,200 training images)
and a disjoint slice of the 8,800 held-out images, as uint8 pixels in device-i.npz with arrays
x, y, x_eval, y_eval: the format data/device.py reads (data.source = "file")."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from edgegossip.data import device, mnist


def split_mnist(
    out: str | Path,
    workers: int,
    partition: str,
    seed: int = 0,
    beta: float = 0.5,
    k: int = 2,
    dataset: str = "mnist",
) -> Iterator[dict]:
    """Write device-0.npz .. device-(workers-1).npz into out from `dataset` (MNIST or
    Fashion-MNIST); yields one row per file."""
    path = mnist.cache_path(dataset)
    if not path.is_file():
        raise mnist.DataError(
            f"{dataset} is not in the cache ({path}); run `edgegossip data fetch {dataset}`"
        )
    with np.load(path) as z:
        x, y = z["x_train"], z["y_train"]
    n = len(y) - mnist.VALIDATION
    shards = device.partitions.cut(partition, y[:n], workers, seed, beta, k)
    held = np.array_split(np.arange(n, len(y)), workers)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for i, (idx, ev) in enumerate(zip(shards, held)):
        dest = out / f"device-{i}.npz"
        _save(
            dest, x=x[idx], y=y[idx].astype(np.int64), x_eval=x[ev], y_eval=y[ev].astype(np.int64)
        )
        yield {
            "device": i,
            "path": str(dest),
            "train": int(len(idx)),
            "eval": int(len(ev)),
            "classes": int(len(np.unique(y[idx]))),
        }


def _save(dest: Path, **arrays) -> None:
    fd, tmp = tempfile.mkstemp(dir=dest.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
