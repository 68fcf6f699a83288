"""What one device trains and evaluates on, and nothing more: its own examples and a small
held-out slice, never the whole data set (a Pi Zero 2 W has 512 MB for everything).

Sources (the agent's [data] table):
- source = "mnist": this worker's shard of MNIST (train.partition), cut from the cache;
- source = "file", path = FILE.npz: arrays `x` [n, features] (float32 used as given, or uint8
  pixels normalised as MNIST's are; whole numbers for a model of token ids) and `y` [n] (int
  labels 0 .. classes - 1; for a model trained with mse, targets [n, *output], or no `y` at
  all: the target is the input itself, an autoencoder's), optionally `x_eval` and `y_eval`
  (the held-out split; otherwise eval_fraction of the rows is held out);
  `edgegossip data split` writes one such file per device;
- source = "file", path = FILE.csv: numeric rows, one label column (`label_column`: its header
  name, or its index; by default a column headed "label", else the last column), an optional
  header row; held out as above.
Every shape is checked against the model at start, with a one-line error.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgegossip.data import mnist, packed
from edgegossip.data import partition as partitions
from edgegossip.data.packed import PackedRows
from edgegossip.errors import UsageError

DataError = mnist.DataError  # the data is missing (exit 4 from the CLI)


class DataMismatch(UsageError, ValueError):
    """The data is there but unreadable, or does not fit the model (a configuration error)."""


@dataclass
class DeviceData:
    # uint8 pixels, held deflated (packed.py) and normalised per batch, or float32 features,
    # [n, inputs]
    x: np.ndarray | PackedRows
    # int64 [n] labels; float32 [n, outputs] targets (an mse model); None: the target is the
    # input itself (an autoencoder: no second copy of the rows)
    y: np.ndarray | None
    x_eval: np.ndarray | PackedRows  # like x, [m, inputs]
    y_eval: np.ndarray | None  # like y, [m]
    row_shape: tuple[int, ...] = ()  # one example's shape as the file held it (before flattening)

    @property
    def rows(self) -> int:
        return len(self.x)

    def batch(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = ready(self.x[pos])
        return x, (x if self.y is None else self.y[pos])

    def held_out(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        x = ready(self.x_eval[i:j])
        return x, (x if self.y_eval is None else self.y_eval[i:j])

    def evaluate(self, model, params: np.ndarray, limit: int, batch: int = 64) -> dict:
        """The model's held-out scores (Model.evaluate) on the first `limit` held-out examples,
        in small batches: the CNN's im2col over 250 images alone took 70 MB, and a device has
        no such room."""
        n = min(limit, len(self.x_eval))
        if model.loss != "mse":
            hits = 0
            for i in range(0, n, batch):
                x, y = self.held_out(i, min(i + batch, n))
                hits += int((model.logits(params, x).argmax(1) == y).sum())
            return {"accuracy": hits / n if n else 0.0}
        total, elements = 0.0, 0
        for i in range(0, n, batch):
            x, y = self.held_out(i, min(i + batch, n))
            total += model.squared_error(params, x, y)
            elements += y.size
        return {"accuracy": None, "eval_mse": round(total / elements, 6) if elements else None}

    def accuracy(self, model, params: np.ndarray, limit: int, batch: int = 64) -> float:
        """A classifier's held-out accuracy (evaluate)."""
        return self.evaluate(model, params, limit, batch)["accuracy"]


def ready(x: np.ndarray | PackedRows) -> np.ndarray:
    """What the model takes: uint8 pixels normalised as MNIST's, anything else as it is."""
    x = np.asarray(x)
    return mnist.normalise(x) if x.dtype == np.uint8 else x


def from_mnist(
    me: int,
    workers: int,
    partition: str,
    seed: int,
    eval_examples: int,
    path: Path | None = None,
    packed: bool = True,
    beta: float = 0.5,
    k: int = 2,
) -> DeviceData:
    """This worker's MNIST shard (partition.cut's, beta and k its parameters) and the first
    eval_examples of the validation hold-out; the rest of the arrays is dropped as soon as it
    is read."""
    path = path or mnist.cache_path()
    if not path.is_file():
        raise DataError(
            f"{path.stem} is not in the cache ({path}); run `edgegossip data fetch {path.stem}`"
        )
    with np.load(path) as z:
        y_all = z["y_train"]
    n = len(y_all) - mnist.VALIDATION
    idx = partitions.cut(partition, y_all[:n], workers, seed, beta, k)[me]
    m = min(eval_examples, mnist.VALIDATION)
    held = np.arange(n, n + m)
    streams, width = _stream_rows(path, "x_train", np.concatenate([idx, held]))
    x: np.ndarray | PackedRows = PackedRows.of(streams[: len(idx)], width)
    x_eval: np.ndarray | PackedRows = PackedRows.of(streams[len(idx) :], width)
    if not packed:  # inflated once, here: the whole set is never held, only this shard
        x, x_eval = np.asarray(x), np.asarray(x_eval)
    return DeviceData(x, y_all[idx].astype(np.int64), x_eval, y_all[held].astype(np.int64))


def _stream_rows(
    path: Path, name: str, rows: np.ndarray, block: int = 2048
) -> tuple[list[bytes], int]:
    """rows (in that order) of a 2-D uint8 array stored in an .npz, each deflated (packed.py),
    and the row width. The file is decompressed a block at a time: a device never holds the
    whole training set, nor even its own shard inflated."""
    import zipfile

    order = np.argsort(rows, kind="stable")
    wanted = rows[order]
    streams: list[bytes] = [b""] * len(rows)
    with zipfile.ZipFile(path) as zf, zf.open(f"{name}.npy") as f:
        fmt = np.lib.format
        major, _ = fmt.read_magic(f)
        header = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
        shape, fortran, dtype = header(f)
        if fortran or len(shape) != 2 or dtype != np.uint8:
            raise DataMismatch(f"{path}: {name} is not a C-ordered 2-D array of uint8")
        k = 0
        for start in range(0, shape[0], block):
            stop = min(start + block, shape[0])
            buf = np.frombuffer(f.read((stop - start) * shape[1]), np.uint8).reshape(-1, shape[1])
            j = int(np.searchsorted(wanted, stop))
            for pos, src in zip(order[k:j].tolist(), (wanted[k:j] - start).tolist()):
                streams[pos] = packed.deflate(buf[src])
            k = j
    return streams, shape[1]


def from_file(
    path: str | Path,
    eval_fraction: float = 0.1,
    label_column: str = "",
    seed: int = 0,
    packed: bool = False,
    targets: bool = False,
) -> DeviceData:
    """This device's file; with targets (a model trained with mse), y holds float targets,
    or is absent: the input is its own target."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data.path: {path} does not exist")
    if path.suffix == ".npz":
        arrays = _read_npz(path, packed)
        if "x" not in arrays or ("y" not in arrays and not targets):
            raise DataMismatch(f"data.path: {path} needs arrays x and y (has {', '.join(arrays)})")
        x, y = arrays["x"], arrays.get("y")
        held = (arrays.get("x_eval"), arrays.get("y_eval") if y is not None else None)
    elif path.suffix == ".csv":
        x, y = _read_csv(path, label_column)
        held = (None, None)
    else:
        raise DataMismatch(f"data.path: {path}: use a .npz or a .csv file")
    target = targets_of if targets else labels
    row_shape = tuple(int(d) for d in np.shape(x)[1:])
    x = x if isinstance(x, PackedRows) else features(x, path, "x")
    y = None if y is None else target(y, len(x), path, "y")
    if held[0] is not None and (held[1] is not None or y is None):
        x_eval = held[0] if isinstance(held[0], PackedRows) else features(held[0], path, "x_eval")
        y_eval = (
            None if y is None or held[1] is None else target(held[1], len(x_eval), path, "y_eval")
        )
    else:
        order = np.random.default_rng(seed).permutation(len(x))
        k = max(1, int(round(eval_fraction * len(x)))) if len(x) > 1 else 0
        x_eval, x = x[order[:k]], x[order[k:]]
        y_eval, y = (None, None) if y is None else (y[order[:k]], y[order[k:]])
    if len(x) == 0:
        raise DataMismatch(f"data.path: {path} holds no training rows")
    return DeviceData(x, y, x_eval, y_eval, row_shape)


def _read_npz(path: Path, packed: bool) -> dict:
    """The file's arrays. With packed, an `x` and `x_eval` both stored as 2-D uint8 pixel rows
    (what `edgegossip data split` writes) are read deflated, a block at a time, as a shard of
    MNIST is: never held inflated (a 2-device Fashion-MNIST file is 20 MB of pixels)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            rows = {k: _pixel_rows(z, k) for k in ("x", "x_eval") if k in z.files}
            pack = packed and len(rows) == 2 and all(rows.values())
            arrays = {k: z[k] for k in z.files if not (pack and k in rows)}
        for k in rows if pack else ():
            arrays[k] = PackedRows.of(*_stream_rows(path, k, np.arange(rows[k])))
    except (OSError, ValueError, KeyError) as e:
        raise DataMismatch(f"data.path: {path} is not a readable .npz ({e})") from None
    return arrays


def _pixel_rows(z, name: str) -> int:
    """How many rows the member holds if it is a C-ordered 2-D uint8 array, else 0."""
    with z.zip.open(f"{name}.npy") as f:
        fmt = np.lib.format
        major, _ = fmt.read_magic(f)
        header = fmt.read_array_header_1_0 if major == 1 else fmt.read_array_header_2_0
        shape, fortran, dtype = header(f)
    return int(shape[0]) if not fortran and len(shape) == 2 and dtype == np.uint8 else 0


def features(x: np.ndarray, path: Path, name: str) -> np.ndarray:
    if x.ndim < 2:
        raise DataMismatch(f"data.path: {path}: {name} must be [rows, features], not {x.shape}")
    x = x.reshape(len(x), -1)
    if x.dtype != np.uint8:
        if not np.issubdtype(x.dtype, np.number):
            raise DataMismatch(f"data.path: {path}: {name} is not numeric ({x.dtype})")
        x = x.astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise DataMismatch(f"data.path: {path}: {name} holds NaN or Inf")
    return np.ascontiguousarray(x)


def labels(y: np.ndarray, n: int, path: Path, name: str) -> np.ndarray:
    y = np.asarray(y).reshape(-1)
    if len(y) != n:
        raise DataMismatch(f"data.path: {path}: {name} has {len(y)} labels for {n} rows")
    if n and (not np.issubdtype(y.dtype, np.number) or (y != np.round(y)).any() or y.min() < 0):
        raise DataMismatch(f"data.path: {path}: {name} must be whole numbers from 0")
    return y.astype(np.int64)


def targets_of(y: np.ndarray, n: int, path: Path, name: str) -> np.ndarray:
    """An mse model's targets: n finite rows, each flattened."""
    y = np.asarray(y)
    if len(y) != n:
        raise DataMismatch(f"data.path: {path}: {name} has {len(y)} targets for {n} rows")
    if not np.issubdtype(y.dtype, np.number):
        raise DataMismatch(f"data.path: {path}: {name} is not numeric ({y.dtype})")
    y = np.ascontiguousarray(y.reshape(n, -1), np.float32)
    if not np.isfinite(y).all():
        raise DataMismatch(f"data.path: {path}: {name} holds NaN or Inf")
    return y


def _read_csv(path: Path, label_column: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    if not rows:
        raise DataMismatch(f"data.path: {path} is empty")
    header = None
    try:
        [float(v) for v in rows[0]]
    except ValueError:
        header, rows = [h.strip() for h in rows[0]], rows[1:]
    width = len(header) if header else len(rows[0])
    if label_column:
        if header and label_column in header:
            col = header.index(label_column)
        elif label_column.lstrip("-").isdigit() and -width <= int(label_column) < width:
            col = int(label_column) % width
        else:
            raise DataMismatch(f"data.label_column: {label_column!r} is not a column of {path}")
    else:
        col = header.index("label") if header and "label" in header else width - 1
    try:
        table = np.array([[float(v) for v in r] for r in rows], np.float64)
    except ValueError as e:
        raise DataMismatch(f"data.path: {path}: a value is not a number ({e})") from None
    if table.ndim != 2 or table.shape[1] != width:
        raise DataMismatch(f"data.path: {path}: rows of different lengths")
    return np.delete(table, col, axis=1).astype(np.float32), table[:, col]


def check(
    data: DeviceData,
    inputs: int,
    classes: int,
    input_shape: tuple[int, ...] = (),
    loss: str = "cross-entropy",
    ids: bool = False,
) -> None:
    """One-line errors for data that does not fit the model: input_shape is a compiled model's
    (its manifest's) example shape, which examples stored with more than one axis must have;
    an mse model's targets must have its output's size (classes: its elements), and a model
    of token ids needs whole numbers from 0."""
    takes = "x".join(map(str, input_shape)) if input_shape else f"{inputs} (set train.inputs)"
    if input_shape and len(data.row_shape) > 1 and data.row_shape != tuple(input_shape):
        have = "x".join(map(str, data.row_shape))
        raise DataMismatch(f"data: the examples are {have}; the model takes {takes}")
    for name, x in (("training rows", data.x), ("held-out rows", data.x_eval)):
        if x.shape[1] != inputs:
            raise DataMismatch(
                f"data: the {name} have {x.shape[1]} features; the model takes {takes}"
            )
    if ids:
        for name, x in (("training rows", data.x), ("held-out rows", data.x_eval)):
            if isinstance(x, PackedRows) or x.dtype == np.uint8:
                raise DataMismatch(f"data: the {name} are uint8 pixels; store token ids as int64")
            if len(x) and ((x != np.round(x)).any() or x.min() < 0 or x.max() >= 2**24):
                raise DataMismatch(f"data: the {name} are not token ids (whole, 0 to 2^24)")
    if loss == "mse":
        for name, y in (("training", data.y), ("held-out", data.y_eval)):
            width = inputs if y is None else y.shape[1]
            if width != classes:
                what = "targets have" if y is not None else "rows (their own targets) have"
                raise DataMismatch(
                    f"data: the {name} {what} {width} values; the model outputs {classes}"
                )
        return
    if data.y is None or data.y_eval is None:  # from_file reads labels for a classifier
        raise DataMismatch("data: a classifier needs labels y")
    top = max(int(data.y.max(initial=0)), int(data.y_eval.max(initial=0)))
    if top >= classes:
        raise DataMismatch(
            f"data: label {top} found; the model has {classes} classes (set train.classes)"
        )
