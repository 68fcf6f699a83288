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


def chunk_distances(y, ref, mask, chunk: int, out) -> None:
    """out[c] = sum of (y[i] - ref[i])**2 over chunk c where mask[c], else 0"""
    n = y.shape[0]
    _check(n, ref.shape[0], mask.shape[0], chunk)
    nchunks = -(-n // chunk)
    if out.shape[0] < nchunks:
        raise ValueError("out has fewer entries than chunks")
    d = np.zeros(nchunks * chunk, np.float64)
    d[:n] = y.astype(np.float64) - ref
    sums = np.einsum("ij,ij->i", d.reshape(nchunks, chunk), d.reshape(nchunks, chunk))
    out[:nchunks] = np.where(np.asarray(mask[:nchunks]) != 0, sums, 0.0)


def scale_toward(y, ref, mask, scale, chunk: int) -> None:
    """y[i] = ref[i] + scale[c] * (y[i] - ref[i]) where mask[c], c = i // chunk"""
    n = y.shape[0]
    _check(n, ref.shape[0], mask.shape[0], chunk)
    nchunks = -(-n // chunk)
    if scale.shape[0] < nchunks:
        raise ValueError("scale has fewer entries than chunks")
    k = np.where(np.asarray(mask[:nchunks]) != 0, scale[:nchunks], 1.0).astype(np.float32)
    sel = np.repeat(k != 1.0, chunk)[:n]
    per = np.repeat(k, chunk)[:n][sel]
    y[sel] = ref[sel] + per * (y[sel] - ref[sel])


def scatter_chunk(buf, mask, payload, byte_offset: int, chunk_index: int) -> bool:
    """buf[byte_offset:byte_offset+len(payload)] = payload; mask[chunk_index] = 1.

    Returns False, touching nothing, when the range or the chunk index lies outside the buffer."""
    length = len(payload)
    if (
        byte_offset < 0
        or byte_offset > buf.shape[0] - length
        or chunk_index < 0
        or chunk_index >= mask.shape[0]
    ):
        return False
    buf[byte_offset : byte_offset + length] = np.frombuffer(payload, dtype=np.uint8)
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


# -- payload codecs (see native/_kernels_c.pyx): float16, bfloat16, int8 with a scale a chunk --

F16_MAX = np.float32(65504.0)


def f16_encode(x, out) -> None:
    """out (2 bytes an element, little-endian) = x as IEEE float16, saturated at +-65504."""
    n = x.shape[0]
    if out.shape[0] < 2 * n:
        raise ValueError("out is shorter than 2 bytes an element")
    out[: 2 * n] = np.clip(x, -F16_MAX, F16_MAX).astype("<f2").view(np.uint8)


def f16_decode(p, out) -> None:
    """out = the float16 values in p (2 bytes an element)."""
    n = out.shape[0]
    if len(p) < 2 * n:
        raise ValueError("payload is shorter than 2 bytes an element")
    out[:] = np.frombuffer(p, "<f2", n)


def bf16_encode(x, out) -> None:
    """out (2 bytes an element) = x as bfloat16: the top 16 bits of float32, rounded."""
    n = x.shape[0]
    if out.shape[0] < 2 * n:
        raise ValueError("out is shorter than 2 bytes an element")
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = np.where(
        nan, u | np.uint32(0x400000), u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    )
    out[: 2 * n] = (r >> np.uint32(16)).astype("<u2").view(np.uint8)


def bf16_decode(p, out) -> None:
    """out = the bfloat16 values in p (2 bytes an element)."""
    n = out.shape[0]
    if len(p) < 2 * n:
        raise ValueError("payload is shorter than 2 bytes an element")
    out.view(np.uint32)[:] = np.frombuffer(p, "<u2", n).astype(np.uint32) << np.uint32(16)


def i8_encode(x, out, chunk: int) -> None:
    """Per chunk of x (chunk elements, the last may be short): a float32 scale = max|x| / 127,
    then each element as round(x * (1 / scale)) in int8, so out holds n + 4 * chunks bytes. A chunk
    holding NaN or Inf gets a NaN scale (receivers drop it) and zeros; one whose scale would be
    below the smallest normal float (every |x| under about 1.5e-36) gets scale 0 and zeros."""
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    n = x.shape[0]
    nchunks = -(-n // chunk)
    if out.shape[0] < n + 4 * nchunks:
        raise ValueError("out is shorter than the encoded chunks")
    for c in range(nchunks):
        v = x[c * chunk : (c + 1) * chunk]
        o = c * chunk + 4 * c
        if not np.isfinite(v).all():
            scale, q = np.float32(np.nan), np.zeros(len(v), np.int8)
        else:
            scale = np.abs(v).max() / np.float32(127) if len(v) else np.float32(0)
            if scale < np.finfo(np.float32).tiny:  # 1 / scale would overflow: send zeros
                scale = np.float32(0)
            q = (
                np.zeros(len(v), np.int8)
                if scale == 0
                else np.clip(np.rint(v * (np.float32(1) / scale)), -127, 127).astype(np.int8)
            )
        out[o : o + 4] = np.array([scale], "<f4").view(np.uint8)
        out[o + 4 : o + 4 + len(v)] = q.view(np.uint8)


def i8_decode(p, out, chunk: int) -> None:
    """out = scale * q, chunk by chunk, from what i8_encode wrote."""
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    n = out.shape[0]
    nchunks = -(-n // chunk)
    if len(p) < n + 4 * nchunks:
        raise ValueError("payload is shorter than the encoded chunks")
    raw = np.frombuffer(p, np.uint8)
    for c in range(nchunks):
        m = min(chunk, n - c * chunk)
        o = c * chunk + 4 * c
        scale = raw[o : o + 4].view("<f4")[0]
        out[c * chunk : c * chunk + m] = (
            raw[o + 4 : o + 4 + m].view(np.int8).astype(np.float32) * scale
        )
