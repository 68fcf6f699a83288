"""Rows of uint8 pixels held deflated in memory, one zlib stream per row, inflated a batch at a
time.

A device's MNIST shard is the largest thing an agent holds after its model vectors: 12,800 rows
of 784 bytes in a 4-agent fleet, 10 MB, and twice that with 2 agents. Deflated row by row it
takes about a quarter of that (MNIST's pixels are mostly 0), and the training loop only ever
reads a batch of rows in a shuffled order: a batch of 32 costs about 90 us more than from a
plain array, against 7-10 ms for the seed MLP's forward and backward pass alone on this
machine (about 1% of a step; docs/results.md has the figures). One stream per row keeps any row
reachable without its neighbours; level 1 deflates nearly as small as level 9 here, and
quicker.
"""

from __future__ import annotations

import zlib

import numpy as np

LEVEL = 1


def deflate(row: np.ndarray) -> bytes:
    return zlib.compress(np.ascontiguousarray(row).tobytes(), LEVEL)


class PackedRows:
    """A read-only [n, width] uint8 array: indexing with a slice or an index array returns a
    read-only ndarray of those rows; np.asarray() returns all of them."""

    dtype = np.dtype(np.uint8)
    ndim = 2

    def __init__(self, blob: bytes, ends: np.ndarray, width: int):
        self._blob = blob
        self._ends = ends  # int64 [n]: where each row's stream ends in blob
        self.shape = (len(ends), width)

    @classmethod
    def pack(cls, rows: np.ndarray) -> PackedRows:
        if rows.dtype != np.uint8 or rows.ndim != 2:
            raise ValueError("PackedRows holds 2-D uint8 rows")
        return cls.of([deflate(r) for r in rows], rows.shape[1])

    @classmethod
    def of(cls, streams: list[bytes], width: int) -> PackedRows:
        """From rows already deflated one by one (as the MNIST shard is read)."""
        ends = np.cumsum([len(s) for s in streams], dtype=np.int64)
        return cls(b"".join(streams), ends, width)

    @property
    def nbytes(self) -> int:
        """What the rows take in memory, packed."""
        return len(self._blob) + self._ends.nbytes

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        idx = np.arange(len(self))[key] if isinstance(key, slice) else np.asarray(key)
        if idx.ndim != 1:
            raise IndexError("PackedRows takes a slice or a 1-D index array")
        n = len(self)
        if len(idx) and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"row index out of range for {n} rows")
        idx = idx % n
        ends = self._ends
        stops = ends[idx].tolist()
        starts = np.where(idx > 0, ends[idx - 1], 0).tolist()
        view = memoryview(self._blob)
        inflated = b"".join(zlib.decompress(view[a:b]) for a, b in zip(starts, stops))
        return np.frombuffer(inflated, np.uint8).reshape(len(idx), self.shape[1])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self[:]
        return rows if dtype is None else rows.astype(dtype)
