"""Load a pickle of NumPy arrays without running arbitrary code and without trusting memory to
it. A pickle is a program: this unpickler admits only the calls that rebuild a plain numeric
ndarray, and checks every state it is asked to apply before NumPy sees it.

Naming the right globals is not enough: numpy.dtype's state can describe an object dtype, and an
array of objects rebuilt from raw bytes takes those bytes as pointers (a crafted pickle using only
the allowed names crashed the loader at an address of its author's choosing). So dtypes are
numeric only (bool, int, uint, float; no fields, no subarrays, no objects), and an array's state
is applied only when its bytes are exactly its shape times its item size. The pure-Python
unpickler is used because its opcodes can be checked one by one; the C one cannot be hooked."""

from __future__ import annotations

import codecs
import io
import pickle
import re
from typing import Any

import numpy as np

from edgegossip.errors import EdgegossipError

try:  # numpy 2 moved the reconstruct helper; pickles written by numpy 1 still name the old path
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy < 2
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

_NUMERIC = re.compile(r"[|<>=]?[biuf][1248]")
MAX_ARRAY_BYTES = 1 << 30  # no array in a data set this loader reads is near it


class UnsafePickle(EdgegossipError, pickle.UnpicklingError):
    pass


def _dtype(spec, align=False, copy=True) -> np.dtype:
    if not isinstance(spec, str) or not _NUMERIC.fullmatch(spec):
        raise UnsafePickle(f"pickle asks for dtype {spec!r}; only numeric dtypes are allowed")
    return np.dtype(spec)


class _NdarrayName:
    """What the pickle's `numpy.ndarray` stands for: a name _reconstruct takes, never a class it
    may call (np.ndarray(shape, "O", buffer) would make pointers of the buffer's bytes)."""


def _reconstruct_array(cls, shape, typecode):
    if cls is not _NdarrayName:
        raise UnsafePickle("pickle rebuilds something other than a numpy array")
    return _reconstruct(np.ndarray, (0,), b"b")


def _encode(text, encoding="utf-8"):
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise UnsafePickle(f"pickle calls _codecs.encode with {encoding!r}")
    return codecs.encode(text, "latin1")


_ALLOWED = {
    ("numpy", "ndarray"): _NdarrayName,
    ("numpy", "dtype"): _dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct_array,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct_array,
    ("_codecs", "encode"): _encode,  # how Python 3 writes bytes at protocol 2
}


def _check_dtype_state(state) -> None:
    # (version, byte order, subarray, names, fields, elsize, alignment, flags[, metadata])
    if (
        not isinstance(state, tuple)
        or len(state) not in (8, 9)
        or state[0] != 3
        or state[1] not in ("<", ">", "|", "=")
        or any(x is not None for x in state[2:5])
        or not all(isinstance(x, int) for x in state[5:8])
        or state[7] != 0  # flags: an object dtype has them set
        or (len(state) == 9 and state[8] is not None)
    ):
        raise UnsafePickle("pickle gives a dtype a state other than a plain number's")


def _check_array_state(state) -> None:
    # (version, shape, dtype, fortran order, raw bytes)
    if not isinstance(state, tuple) or len(state) != 5 or state[0] != 1:
        raise UnsafePickle("pickle gives an array a state of the wrong form")
    _, shape, dtype, _, raw = state
    if not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.kind not in "biuf":
        raise UnsafePickle("pickle gives an array a dtype that is not numeric")
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise UnsafePickle("pickle gives an array a shape that is not a tuple of sizes")
    n = dtype.itemsize
    for d in shape:
        n *= d
        if n > MAX_ARRAY_BYTES:
            raise UnsafePickle(f"pickle asks for an array over {MAX_ARRAY_BYTES} bytes")
    if not isinstance(raw, (bytes, str)) or len(raw) != n:
        raise UnsafePickle("pickle gives an array bytes that do not match its shape")


# the pure-Python unpickler: its opcodes are a table one can hook; typeshed does not describe it
_PyUnpickler: Any = pickle._Unpickler  # type: ignore[attr-defined]


class _ArrayUnpickler(_PyUnpickler):
    dispatch = dict(_PyUnpickler.dispatch)

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickle(
                f"pickle refers to {module}.{name}; only numpy arrays are allowed"
            ) from None

    def load_build(self) -> None:
        state, obj = self.stack[-1], self.stack[-2]
        if isinstance(obj, np.dtype):
            _check_dtype_state(state)
        elif isinstance(obj, np.ndarray):
            _check_array_state(state)
        else:
            raise UnsafePickle(f"pickle sets the state of a {type(obj).__name__}")
        super().load_build()
        if isinstance(obj, np.dtype) and (obj.hasobject or obj.kind not in "biuf"):
            raise UnsafePickle("pickle turned a dtype into one that is not numeric")

    dispatch[pickle.BUILD[0]] = load_build

    def persistent_load(self, pid):
        raise UnsafePickle("pickle uses persistent ids")


def load_arrays(data: bytes):
    """Unpickle data that holds only tuples, lists and numpy arrays (latin1: Python 2 pickles)."""
    try:
        return _ArrayUnpickler(io.BytesIO(data), encoding="latin1").load()
    except UnsafePickle:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError) as e:
        raise UnsafePickle(f"not a pickle of arrays ({type(e).__name__}: {e})") from None
