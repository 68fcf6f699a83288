"""The one place that picks the compiled kernels or the NumPy reference.

EDGEGOSSIP_NO_EXTENSIONS=1 forces the NumPy reference (extensions.py, which loads every compiled
module). IMPLEMENTATION is "cython" or "numpy".
"""

from __future__ import annotations

from edgegossip import _kernels_py, extensions

# no compiler on this device: slower, same results
_impl = extensions.load("_kernels_c") or _kernels_py
IMPLEMENTATION = "numpy" if _impl is _kernels_py else "cython"

NAMES = (
    "elastic_pull",
    "masked_copy",
    "masked_accumulate",
    "masked_average",
    "chunk_distances",
    "scale_toward",
    "scatter_chunk",
    "all_finite",
    "nesterov_step",
    "f16_encode",
    "f16_decode",
    "bf16_encode",
    "bf16_decode",
    "i8_encode",
    "i8_decode",
)

elastic_pull = _impl.elastic_pull
masked_copy = _impl.masked_copy
masked_accumulate = _impl.masked_accumulate
masked_average = _impl.masked_average
chunk_distances = _impl.chunk_distances
scale_toward = _impl.scale_toward
scatter_chunk = _impl.scatter_chunk
all_finite = _impl.all_finite
nesterov_step = _impl.nesterov_step
f16_encode = _impl.f16_encode
f16_decode = _impl.f16_decode
bf16_encode = _impl.bf16_encode
bf16_decode = _impl.bf16_decode
i8_encode = _impl.i8_encode
i8_decode = _impl.i8_decode
