"""NumPy reference kernels: the fallback when the extension is absent, and the test oracle.

Same names, signatures and results as the compiled module built from native/_kernels_c.pyx.
Element i belongs to chunk i // chunk; mask[c] != 0 means chunk c arrived.
"""

from __future__ import annotations

import numpy as np


def _check(n: int, m: int, nmask: int, chunk: int) -> None:
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if m != n:
        raise ValueError(f"length mismatch: {n} != {m}")
    if nmask < -(-n // chunk):
        raise ValueError(f"mask has {nmask} entries, need {-(-n // chunk)}")


def _element_mask(mask: np.ndarray, n: int, chunk: int) -> np.ndarray:
    nchunks = -(-n // chunk)
    return np.repeat(np.asarray(mask[:nchunks], dtype=bool), chunk)[:n]


def elastic_pull(x, ref, y, mask, chunk: int, alpha: float) -> None:
    """x[i] -= alpha * (ref[i] - y[i]) where mask[i // chunk]; ref may be x itself."""
    _check(x.shape[0], y.shape[0], mask.shape[0], chunk)
    _check(x.shape[0], ref.shape[0], mask.shape[0], chunk)
    sel = _element_mask(mask, x.shape[0], chunk)
    d = ref[sel] - y[sel]
    d *= np.float32(alpha)
    x[sel] -= d


def masked_copy(x, y, mask, chunk: int) -> None:
    """x[i] = y[i] where mask[i // chunk]"""
    _check(x.shape[0], y.shape[0], mask.shape[0], chunk)
    sel = _element_mask(mask, x.shape[0], chunk)
    x[sel] = y[sel]


def masked_accumulate(acc, count, y, mask, chunk: int) -> None:
    """acc[i] += y[i] and count[c] += 1 where mask[c], c = i // chunk"""
    _check(acc.shape[0], y.shape[0], mask.shape[0], chunk)
    nchunks = -(-acc.shape[0] // chunk)
    if count.shape[0] < nchunks:
        raise ValueError("count has fewer entries than chunks")
    sel = _element_mask(mask, acc.shape[0], chunk)
    acc[sel] += y[sel]
    count[:nchunks] += np.asarray(mask[:nchunks] != 0, dtype=count.dtype)


def masked_average(x, acc, count, chunk: int) -> None:
    """x[i] = acc[i] / count[c] where count[c] > 0, c = i // chunk; x unchanged elsewhere"""
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    n = x.shape[0]
    if acc.shape[0] != n:
        raise ValueError(f"length mismatch: {n} != {acc.shape[0]}")
    nchunks = -(-n // chunk)
    if count.shape[0] < nchunks:
        raise ValueError("count has fewer entries than chunks")
    per_elem = np.repeat(count[:nchunks], chunk)[:n]
    sel = per_elem > 0
    inv = np.float32(1.0) / per_elem[sel].astype(np.float32)
    x[sel] = acc[sel] * inv


def scatter_chunk(buf, mask, payload, byte_offset: int, chunk_index: int) -> bool:
    """buf[byte_offset:byte_offset+len(payload)] = payload; mask[chunk_index] = 1.

    Returns False, touching nothing, when the range or the chunk index lies outside the buffer."""
    length = len(payload)
    if (byte_offset < 0 or byte_offset > buf.shape[0] - length
            or chunk_index < 0 or chunk_index >= mask.shape[0]):
        return False
    buf[byte_offset:byte_offset + length] = np.frombuffer(payload, dtype=np.uint8)
    mask[chunk_index] = 1
    return True


def all_finite(payload) -> bool:
    """True when every float32 in payload (little-endian bytes) is neither NaN nor +-Inf."""
    if len(payload) % 4:
        raise ValueError("payload length is not a multiple of 4")
    return bool(np.isfinite(np.frombuffer(payload, dtype="<f4")).all())


def nesterov_step(x, v, g, lr: float, mu: float) -> None:
    """v = mu * v + g; x -= lr * (g + mu * v)   (SGD with Nesterov momentum, one pass)"""
    if v.shape[0] != x.shape[0] or g.shape[0] != x.shape[0]:
        raise ValueError("length mismatch")
    v *= np.float32(mu)
    v += g
    x -= np.float32(lr) * (g + np.float32(mu) * v)
