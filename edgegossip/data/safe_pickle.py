"""Load a pickle of NumPy arrays without running arbitrary code: a pickle is a program, so the
unpickler admits only the three globals that rebuild an ndarray and refuses everything else."""

from __future__ import annotations

import codecs
import io
import pickle

import numpy as np

from edgegossip.errors import EdgegossipError

try:  # numpy 2 moved the reconstruct helper; pickles written by numpy 1 still name the old path
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy < 2
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

_ALLOWED = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("_codecs", "encode"): codecs.encode,  # how Python 3 writes bytes at protocol 2
}


class UnsafePickle(EdgegossipError, pickle.UnpicklingError):
    pass


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickle(
                f"pickle refers to {module}.{name}; only numpy arrays are allowed"
            ) from None


def load_arrays(data: bytes):
    """Unpickle data that holds only tuples, lists and numpy arrays (latin1: Python 2 pickles)."""
    return _ArrayUnpickler(io.BytesIO(data), encoding="latin1").load()
