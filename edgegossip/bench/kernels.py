"""`edgegossip bench kernels`: each kernel on the seed MLP's 2,913,290 parameters and on 25 M,
in GB/s of memory touched, beside the NumPy reference and np.copyto of the same array.

Bytes touched per element: elastic_pull reads x and y and writes x (12); masked_copy reads y and
writes x (8); masked_accumulate reads acc and y, writes acc (12); masked_average reads acc,
writes x (8); scatter_chunk copies every chunk of a model (8); all_finite reads (4);
chunk_distances reads y and x (8) and scale_toward reads them and writes y (12), the merge
bound's two passes (protocol/bound.py; every chunk scaled); copyto (8).
Masks are 90% set (10% of chunks lost), at the default chunk size.
"""

from __future__ import annotations

import functools

import numpy as np

from edgegossip import _kernels_py, kernels
from edgegossip.bench.timing import best_time
from edgegossip.dataplane import wire

SIZES = (2_913_290, 25_000_000)


def _cases(n: int, impl, rng: np.random.Generator):
    chunk = wire.default_chunk_bytes() // 4
    nchunks = -(-n // chunk)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    acc = np.zeros(n, dtype=np.float32)
    count = np.zeros(nchunks, dtype=np.int32)
    mask = (rng.random(nchunks) < 0.9).astype(np.uint8)
    sq = np.zeros(nchunks, np.float64)
    scale = np.full(nchunks, 0.5, np.float32)
    ybytes = y.view(np.uint8)
    xbytes = x.view(np.uint8)
    cb = chunk * 4
    payloads = [memoryview(ybytes[c * cb : (c + 1) * cb]) for c in range(nchunks)]

    def scatter():
        for c, p in enumerate(payloads):
            impl.scatter_chunk(xbytes, mask, p, c * cb, c)

    return {
        "elastic_pull": (12, lambda: impl.elastic_pull(x, x, y, mask, chunk, 0.5)),
        "masked_copy": (8, lambda: impl.masked_copy(x, y, mask, chunk)),
        "masked_accumulate": (12, lambda: impl.masked_accumulate(acc, count, y, mask, chunk)),
        "masked_average": (8, lambda: impl.masked_average(x, acc, count + 1, chunk)),
        "scatter_chunk": (8, scatter),
        "all_finite": (4, lambda: impl.all_finite(memoryview(ybytes))),
        "chunk_distances": (8, lambda: impl.chunk_distances(y, x, mask, chunk, sq)),
        "scale_toward": (12, lambda: impl.scale_toward(y, x, mask, scale, chunk)),
    }


def run(sizes=SIZES, repeat: int = 5) -> dict:
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        src = rng.standard_normal(n, dtype=np.float32)
        dst = np.empty_like(src)
        copy_gbps = 8 * n / best_time(functools.partial(np.copyto, dst, src), repeat) / 1e9
        native = _cases(n, kernels, rng)
        ref = _cases(n, _kernels_py, rng)
        for name, (per_elem, fn) in native.items():
            t_native = best_time(fn, repeat)
            t_numpy = best_time(ref[name][1], repeat)
            rows.append(
                {
                    "kernel": name,
                    "n": n,
                    "native_gbps": round(per_elem * n / t_native / 1e9, 2),
                    "numpy_gbps": round(per_elem * n / t_numpy / 1e9, 2),
                    "copy_gbps": round(copy_gbps, 2),
                    "native_ms": round(t_native * 1e3, 3),
                    "numpy_ms": round(t_numpy * 1e3, 3),
                    "ratio_to_copy": round(per_elem * n / t_native / 1e9 / copy_gbps, 2),
                    "speedup_vs_numpy": round(t_numpy / t_native, 1),
                }
            )
    return {"benchmark": "kernels", "implementation": kernels.IMPLEMENTATION, "results": rows}
