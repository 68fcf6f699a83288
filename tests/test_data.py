"""MNIST loading from IDX files and from a pickle, the safe unpickler, the CLI's errors."""

import gzip
import pickle
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from edgegossip.cli.app import cli
from edgegossip.data import mnist
from edgegossip.data.safe_pickle import UnsafePickle, load_arrays


def _write_idx(path, arr):
    header = struct.pack(">BBBB", 0, 0, 8, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def _small(tmp_path):
    rng = np.random.default_rng(0)
    a = {
        "x_train": rng.integers(0, 256, (60, 784), dtype=np.uint8),
        "y_train": rng.integers(0, 10, 60, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (20, 784), dtype=np.uint8),
        "y_test": rng.integers(0, 10, 20, dtype=np.uint8),
    }
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", a["x_train"].reshape(60, 28, 28))
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", a["y_train"])
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", a["x_test"].reshape(20, 28, 28))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", a["y_test"])
    return a


def test_idx_roundtrip(tmp_path):
    a = _small(tmp_path)
    b = mnist.from_idx_dir(tmp_path)
    assert mnist.digest(a) == mnist.digest(b)


def test_pickle_source_matches_idx_bytes(tmp_path):
    a = _small(tmp_path)
    f = lambda x: x.astype(np.float32) / 256  # noqa: E731 - the classic pickle's scaling
    blob = gzip.compress(
        pickle.dumps(
            (
                (f(a["x_train"][:50]), a["y_train"][:50].astype(np.int64)),
                (f(a["x_train"][50:]), a["y_train"][50:].astype(np.int64)),
                (f(a["x_test"]), a["y_test"].astype(np.int64)),
            ),
            protocol=2,
        )
    )
    assert mnist.digest(mnist.from_pickle(blob)) == mnist.digest(a)


def test_unpickler_refuses_code():
    class Evil:
        def __reduce__(self):
            return (print, ("owned",))

    with pytest.raises(UnsafePickle):
        load_arrays(pickle.dumps(Evil()))


def test_digest_mismatch_and_truncated_idx(tmp_path):
    a = _small(tmp_path)
    with pytest.raises(mnist.DataError):
        mnist.verify(a)  # random arrays are not MNIST
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03" + b"\x00" * 8)
    with pytest.raises(mnist.DataError):
        mnist.read_idx(tmp_path / "bad" / "train-images-idx3-ubyte")


def test_fetch_from_wrong_dir_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEGOSSIP_CACHE", str(tmp_path / "cache"))
    _small(tmp_path)
    res = CliRunner().invoke(cli, ["data", "fetch", "mnist", "--from", str(tmp_path)])
    assert res.exit_code == 4
    assert "SHA-256" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "cache" / "mnist.npz").exists()


def test_load_without_cache_is_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEGOSSIP_CACHE", str(tmp_path))
    with pytest.raises(mnist.DataError, match="data fetch mnist"):
        mnist.load()
