"""A user's own data for an emulated fleet (`emulate --data`): one .npz cut across the nodes, or
a folder holding one .npz per node, each in the format data/device.py reads (arrays x and y,
optionally x_eval and y_eval). What the fleet's average model is scored on: the file's x_test and
y_test if it has them, else every node's held-out rows together.

The cut is the run's partition (train.partition, data/partition.py): iid by default, a seeded
permutation keeping every row; dirichlet or classes by the file's labels. A folder is the user's
own cut, as a real fleet's devices hold their data: no partition applies to it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgegossip.data import device, mnist
from edgegossip.data.split import _save


@dataclass(frozen=True)
class TestSet:
    """What summaries score a model on (the shape of mnist.Mnist's test arrays)."""

    x_test: np.ndarray
    y_test: np.ndarray


def named(data: str) -> bool:
    """A data set `edgegossip data fetch` knows, as opposed to a path of the user's."""
    return data in mnist.DATASETS


def files_of(data: str | Path, nodes: int) -> list[Path]:
    """A folder's .npz files in node order (device-2 before device-10), one per node, or the one
    file to cut; a one-line error otherwise."""
    p = Path(data)
    if p.is_dir():
        files = sorted(p.glob("*.npz"), key=_natural)
        if len(files) != nodes:
            raise device.DataMismatch(
                f"--data {p}: {len(files)} .npz files for {nodes} nodes (one file per node)"
            )
        return files
    if p.is_file() and p.suffix == ".npz":
        return [p]
    if p.exists():
        raise device.DataMismatch(f"--data {p}: a .npz file or a folder of them, one per node")
    raise device.DataError(f"--data {p}: no such data set, file or folder")


def _natural(p: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.stem)]


def check_partition(data: str | Path, kind: str) -> None:
    """A folder is its user's own cut: DataMismatch for a partition given beside it."""
    if kind != "iid" and Path(data).is_dir():
        raise device.DataMismatch(f"--partition {kind}: --data {data} holds a file per node")


def per_node(
    data: str | Path, nodes: int, seed: int, out: Path, kind: str = "iid", **cut_by
) -> list[Path]:
    """One file per node: a folder's own, or the one file's rows cut into out/device-i.npz
    (training rows by partition `kind`, cut_by its beta and k (partition.cut); held-out rows, if
    it has them, in nodes near-equal iid parts)."""
    files = files_of(data, nodes)
    check_partition(data, kind)
    if len(files) == nodes and Path(data).is_dir():
        for f in files:  # each checked now, not by an agent a minute into the run
            device.from_file(f)
        return files
    arrays = _arrays(files[0])
    rng = np.random.default_rng(seed)
    parts = {
        k: np.array_split(rng.permutation(len(arrays[x])), nodes)
        for k, x in (("train", "x"), ("eval", "x_eval"))
        if x in arrays
    }
    if kind != "iid":
        if "y" not in arrays or arrays["y"].ndim != 1:
            raise device.DataMismatch(f"--partition {kind} cuts by class: {files[0]} has none")
        parts["train"] = device.partitions.cut(kind, arrays["y"], nodes, seed, **cut_by)
    if min(len(p) for p in parts["train"]) == 0:
        raise device.DataMismatch(f"--data {files[0]}: fewer training rows than nodes ({nodes})")
    out.mkdir(parents=True, exist_ok=True)
    dests = []
    for i in range(nodes):
        own: dict[str, np.ndarray] = {
            k: arrays[k][parts["train"][i]] for k in ("x", "y") if k in arrays
        }
        if "eval" in parts:
            own.update(
                {k: arrays[k][parts["eval"][i]] for k in ("x_eval", "y_eval") if k in arrays}
            )
        dests.append(out / f"device-{i}.npz")
        _save(dests[-1], **own)
    return dests


def rows(path: Path) -> int:
    """Training rows in one node's file (an autoencoder's has no y: its rows are x's)."""
    with np.load(path, allow_pickle=False) as z:
        return int(z["x"].shape[0])


def _arrays(path: Path) -> dict[str, np.ndarray]:
    """The file's arrays, checked as a device would check them (one line if not)."""
    with np.load(path, allow_pickle=False) as z:
        targets = "y" not in z.files or z["y"].dtype.kind == "f"
    device.from_file(path, targets=targets)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if "y" in arrays and ("x_eval" in arrays) != ("y_eval" in arrays):
        raise device.DataMismatch(f"--data {path}: x_eval and y_eval come together")
    return arrays


def test_set(
    data: str | Path, files: list[Path], eval_fraction: float, seed: int, targets: bool = False
) -> TestSet:
    """The file's own test arrays, else the nodes' held-out rows as each agent holds them out;
    with targets (an mse model), y as targets, or x itself where the data has no y."""
    p = Path(data)
    target = device.targets_of if targets else device.labels
    if p.is_file():
        with np.load(p, allow_pickle=False) as z:
            if "x_test" in z.files and ("y_test" in z.files or targets):
                x = device.ready(device.features(z["x_test"], p, "x_test"))
                y = target(z["y_test"], len(x), p, "y_test") if "y_test" in z.files else x
                return TestSet(x, y)
    held = [device.from_file(f, eval_fraction, seed=seed, targets=targets) for f in files]
    xs = [device.ready(h.x_eval) for h in held]
    ys = [x if h.y_eval is None else h.y_eval for x, h in zip(xs, held)]
    return TestSet(np.concatenate(xs), np.concatenate(ys))


@dataclass(frozen=True)
class Pool:
    """The user's data held whole in one process (simulate), with mnist.Mnist's attributes:
    training rows (uint8 pixels or float32 features) and their labels, targets, or None (an
    autoencoder's rows are their own targets); validation and test rows ready for the model.
    cut: each worker's rows where the data came as one file per worker, else None."""

    x_train: np.ndarray
    y_train: np.ndarray | None
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    cut: list[np.ndarray] | None

    def batch(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = device.ready(self.x_train[idx])
        return x, (x if self.y_train is None else self.y_train[idx])


def pooled(
    data: str | Path, workers: int, seed: int, eval_fraction: float, targets: bool = False
) -> tuple[Pool, device.DeviceData]:
    """The one file, or the folder's one file per worker joined in worker order, as a Pool;
    and the rows as one device would hold them, for device.check against the model."""
    files = files_of(data, workers)
    held = [device.from_file(f, eval_fraction, seed=seed, targets=targets) for f in files]
    if len({(h.x.dtype, h.row_shape, h.y is None) for h in held}) > 1:
        raise device.DataMismatch(f"--data {data}: the files differ in x's shape or type, or in y")
    whole = held[0] if len(held) == 1 else _joined(held)
    sizes = np.cumsum([0] + [h.rows for h in held])
    cut = None if len(held) == 1 else [np.arange(a, b) for a, b in zip(sizes, sizes[1:])]
    x_val = device.ready(whole.x_eval)
    test = test_set(data, files, eval_fraction, seed, targets)
    y_val = x_val if whole.y_eval is None else whole.y_eval
    return Pool(np.asarray(whole.x), whole.y, x_val, y_val, test.x_test, test.y_test, cut), whole


def _joined(parts: list[device.DeviceData]) -> device.DeviceData:
    def cat(arrays):
        return None if any(a is None for a in arrays) else np.concatenate(arrays)

    return device.DeviceData(
        cat([np.asarray(p.x) for p in parts]),
        cat([p.y for p in parts]),
        cat([np.asarray(p.x_eval) for p in parts]),
        cat([p.y_eval for p in parts]),
        parts[0].row_shape,
    )
