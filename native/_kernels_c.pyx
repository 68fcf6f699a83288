# Compiled gossip kernels. Each public function is a thin typed-memoryview wrapper that checks
# shapes once, then runs a `noexcept nogil` pointer loop with the GIL released so the receive
# thread keeps draining sockets while a kernel runs. edgegossip/_kernels_py.py holds the NumPy
# reference with the same names; tests compare the two.
#
# Chunk geometry shared by every masked kernel: element i belongs to chunk i // chunk; the last
# chunk may be short; mask[c] != 0 means every datagram of chunk c arrived.

from libc.string cimport memcpy
from libc.stdint cimport uint16_t, uint32_t, int32_t
from libc.math cimport rintf, fabsf

ctypedef unsigned char u8


cdef inline Py_ssize_t _nchunks(Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    return (n + chunk - 1) // chunk


cdef int _check(Py_ssize_t n, Py_ssize_t m, Py_ssize_t nmask, Py_ssize_t chunk) except -1:
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if m != n:
        raise ValueError(f"length mismatch: {n} != {m}")
    if nmask < _nchunks(n, chunk):
        raise ValueError(f"mask has {nmask} entries, need {_nchunks(n, chunk)}")
    return 0


cdef void _elastic_pull(float* x, const float* ref, const float* y, const u8* mask,
                        Py_ssize_t n, Py_ssize_t chunk, float alpha) noexcept nogil:
    cdef Py_ssize_t c, i, start, stop
    for c in range(_nchunks(n, chunk)):
        if mask[c]:
            start = c * chunk
            stop = start + chunk if start + chunk < n else n
            for i in range(start, stop):
                x[i] -= alpha * (ref[i] - y[i])


def elastic_pull(float[::1] x, const float[::1] ref, const float[::1] y,
                 const u8[::1] mask, Py_ssize_t chunk, float alpha):
    """x[i] -= alpha * (ref[i] - y[i]) where mask[i // chunk]; ref may be x itself."""
    cdef Py_ssize_t n = x.shape[0]
    _check(n, y.shape[0], mask.shape[0], chunk)
    _check(n, ref.shape[0], mask.shape[0], chunk)
    if n == 0:
        return
    with nogil:
        _elastic_pull(&x[0], &ref[0], &y[0], &mask[0], n, chunk, alpha)


cdef void _masked_copy(float* x, const float* y, const u8* mask,
                       Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    cdef Py_ssize_t c, start, stop
    for c in range(_nchunks(n, chunk)):
        if mask[c]:
            start = c * chunk
            stop = start + chunk if start + chunk < n else n
            memcpy(&x[start], &y[start], (stop - start) * sizeof(float))


def masked_copy(float[::1] x, const float[::1] y, const u8[::1] mask, Py_ssize_t chunk):
    """x[i] = y[i] where mask[i // chunk]"""
    cdef Py_ssize_t n = x.shape[0]
    _check(n, y.shape[0], mask.shape[0], chunk)
    if n == 0:
        return
    with nogil:
        _masked_copy(&x[0], &y[0], &mask[0], n, chunk)


cdef void _masked_accumulate(float* acc, int32_t* count, const float* y, const u8* mask,
                             Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    cdef Py_ssize_t c, i, start, stop
    for c in range(_nchunks(n, chunk)):
        if mask[c]:
            count[c] += 1
            start = c * chunk
            stop = start + chunk if start + chunk < n else n
            for i in range(start, stop):
                acc[i] += y[i]


def masked_accumulate(float[::1] acc, int32_t[::1] count, const float[::1] y,
                      const u8[::1] mask, Py_ssize_t chunk):
    """acc[i] += y[i] and count[c] += 1 where mask[c], c = i // chunk"""
    cdef Py_ssize_t n = acc.shape[0]
    _check(n, y.shape[0], mask.shape[0], chunk)
    if count.shape[0] < _nchunks(n, chunk):
        raise ValueError("count has fewer entries than chunks")
    if n == 0:
        return
    with nogil:
        _masked_accumulate(&acc[0], &count[0], &y[0], &mask[0], n, chunk)


cdef void _masked_average(float* x, const float* acc, const int32_t* count,
                          Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    cdef Py_ssize_t c, i, start, stop
    cdef float inv
    for c in range(_nchunks(n, chunk)):
        if count[c] > 0:
            inv = 1.0 / count[c]
            start = c * chunk
            stop = start + chunk if start + chunk < n else n
            for i in range(start, stop):
                x[i] = acc[i] * inv


def masked_average(float[::1] x, const float[::1] acc, const int32_t[::1] count,
                   Py_ssize_t chunk):
    """x[i] = acc[i] / count[c] where count[c] > 0, c = i // chunk; x unchanged elsewhere"""
    cdef Py_ssize_t n = x.shape[0]
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if acc.shape[0] != n:
        raise ValueError(f"length mismatch: {n} != {acc.shape[0]}")
    if count.shape[0] < _nchunks(n, chunk):
        raise ValueError("count has fewer entries than chunks")
    if n == 0:
        return
    with nogil:
        _masked_average(&x[0], &acc[0], &count[0], n, chunk)


cdef void _chunk_distances(const float* y, const float* ref, const u8* mask, Py_ssize_t n,
                           Py_ssize_t chunk, double* out) noexcept nogil:
    cdef Py_ssize_t c, i, start, stop
    cdef double s0, s1, s2, s3, d0, d1, d2, d3
    for c in range(_nchunks(n, chunk)):
        s0 = s1 = s2 = s3 = 0.0
        if mask[c]:
            start = c * chunk
            stop = start + chunk if start + chunk < n else n
            # four independent sums: one chain of dependent adds ran at a third of copy speed
            i = start
            while i + 4 <= stop:
                d0 = <double>y[i] - <double>ref[i]
                d1 = <double>y[i + 1] - <double>ref[i + 1]
                d2 = <double>y[i + 2] - <double>ref[i + 2]
                d3 = <double>y[i + 3] - <double>ref[i + 3]
                s0 += d0 * d0
                s1 += d1 * d1
                s2 += d2 * d2
                s3 += d3 * d3
                i += 4
            while i < stop:
                d0 = <double>y[i] - <double>ref[i]
                s0 += d0 * d0
                i += 1
        out[c] = (s0 + s1) + (s2 + s3)


def chunk_distances(const float[::1] y, const float[::1] ref, const u8[::1] mask,
                    Py_ssize_t chunk, double[::1] out):
    """out[c] = sum of (y[i] - ref[i])**2 over chunk c where mask[c], else 0"""
    cdef Py_ssize_t n = y.shape[0]
    _check(n, ref.shape[0], mask.shape[0], chunk)
    if out.shape[0] < _nchunks(n, chunk):
        raise ValueError("out has fewer entries than chunks")
    if n == 0:
        return
    with nogil:
        _chunk_distances(&y[0], &ref[0], &mask[0], n, chunk, &out[0])


cdef void _scale_toward(float* y, const float* ref, const u8* mask, const float* scale,
                        Py_ssize_t n, Py_ssize_t chunk) noexcept nogil:
    cdef Py_ssize_t c, i, start, stop
    cdef float k
    for c in range(_nchunks(n, chunk)):
        k = scale[c]
        if mask[c] and k != 1.0:
            start = c * chunk
            stop = start + chunk if start + chunk < n else n
            for i in range(start, stop):
                y[i] = ref[i] + k * (y[i] - ref[i])


def scale_toward(float[::1] y, const float[::1] ref, const u8[::1] mask,
                 const float[::1] scale, Py_ssize_t chunk):
    """y[i] = ref[i] + scale[c] * (y[i] - ref[i]) where mask[c], c = i // chunk"""
    cdef Py_ssize_t n = y.shape[0]
    _check(n, ref.shape[0], mask.shape[0], chunk)
    if scale.shape[0] < _nchunks(n, chunk):
        raise ValueError("scale has fewer entries than chunks")
    if n == 0:
        return
    with nogil:
        _scale_toward(&y[0], &ref[0], &mask[0], &scale[0], n, chunk)


def scatter_chunk(u8[::1] buf, u8[::1] mask, const u8[::1] payload,
                  Py_ssize_t byte_offset, Py_ssize_t chunk_index):
    """buf[byte_offset:byte_offset+len(payload)] = payload; mask[chunk_index] = 1.

    Returns False, touching nothing, when the range or the chunk index lies outside the buffer."""
    cdef Py_ssize_t length = payload.shape[0]
    if (byte_offset < 0 or length < 0 or byte_offset > buf.shape[0] - length
            or chunk_index < 0 or chunk_index >= mask.shape[0]):
        return False
    if length:
        with nogil:
            memcpy(&buf[byte_offset], &payload[0], length)
    mask[chunk_index] = 1
    return True


cdef bint _all_finite(const u8* p, Py_ssize_t nbytes) noexcept nogil:
    # Checks exponent bits on the raw words: payloads sit at odd offsets inside datagrams, so
    # they cannot be read as float* directly; memcpy of 4 bytes compiles to one unaligned load.
    cdef Py_ssize_t i
    cdef uint32_t w, bad = 0
    for i in range(0, nbytes - 3, 4):
        memcpy(&w, p + i, 4)
        bad |= ((w & 0x7F800000u) == 0x7F800000u)
    return bad == 0


def all_finite(const u8[::1] payload):
    """True when every float32 in payload (little-endian bytes) is neither NaN nor +-Inf."""
    cdef Py_ssize_t nbytes = payload.shape[0]
    cdef bint ok
    if nbytes % 4:
        raise ValueError("payload length is not a multiple of 4")
    if nbytes == 0:
        return True
    with nogil:
        ok = _all_finite(&payload[0], nbytes)
    return ok


cdef void _nesterov_step(float* x, float* v, const float* g, Py_ssize_t n, float lr,
                         float mu) noexcept nogil:
    cdef Py_ssize_t i
    cdef float vi
    for i in range(n):
        vi = mu * v[i] + g[i]
        v[i] = vi
        x[i] -= lr * (g[i] + mu * vi)


def nesterov_step(float[::1] x, float[::1] v, const float[::1] g, float lr, float mu):
    """v = mu * v + g; x -= lr * (g + mu * v)   (SGD with Nesterov momentum, one pass)"""
    cdef Py_ssize_t n = x.shape[0]
    if v.shape[0] != n or g.shape[0] != n:
        raise ValueError("length mismatch")
    if n == 0:
        return
    with nogil:
        _nesterov_step(&x[0], &v[0], &g[0], n, lr, mu)


# -- payload codecs: float32 parameters as float16, bfloat16 or int8 on the wire ----------------
# The per-element and per-chunk routines live in _codec.pxi, shared with the wire fast path.

include "_codec.pxi"


cdef int _elementwise(int dtype, const float[::1] x, u8[::1] out) except -1:
    cdef Py_ssize_t n = x.shape[0]
    if out.shape[0] < _encoded_len(dtype, n):
        raise ValueError("out is shorter than 2 bytes an element")
    if n:
        with nogil:
            _encode_chunk(dtype, &x[0], &out[0], n)
    return 0


cdef int _from_elementwise(int dtype, const u8[::1] p, float[::1] out) except -1:
    cdef Py_ssize_t n = out.shape[0]
    if p.shape[0] < _encoded_len(dtype, n):
        raise ValueError("payload is shorter than 2 bytes an element")
    if n:
        with nogil:
            _decode_chunk(dtype, &p[0], &out[0], n)
    return 0


def f16_encode(const float[::1] x, u8[::1] out):
    """out (2 bytes an element, little-endian) = x as IEEE float16, saturated at +-65504."""
    _elementwise(CODEC_F16, x, out)


def f16_decode(const u8[::1] p, float[::1] out):
    """out = the float16 values in p (2 bytes an element)."""
    _from_elementwise(CODEC_F16, p, out)


def bf16_encode(const float[::1] x, u8[::1] out):
    """out (2 bytes an element) = x as bfloat16: the top 16 bits of float32, rounded."""
    _elementwise(CODEC_BF16, x, out)


def bf16_decode(const u8[::1] p, float[::1] out):
    """out = the bfloat16 values in p (2 bytes an element)."""
    _from_elementwise(CODEC_BF16, p, out)


cdef int _i8_check(Py_ssize_t have, Py_ssize_t n, Py_ssize_t chunk) except -1:
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if have < n + 4 * _nchunks(n, chunk):
        raise ValueError("buffer is shorter than the encoded chunks")
    return 0


def i8_encode(const float[::1] x, u8[::1] out, Py_ssize_t chunk, bint baseline=False):
    """Per chunk of x (chunk elements, the last may be short): a float32 scale = max|x| / 127,
    then each element as round(x * (1 / scale)) in int8, so out holds n + 4 * chunks bytes. A chunk
    holding NaN or Inf gets a NaN scale (receivers drop it) and zeros; one whose scale would be
    below the smallest normal float (every |x| under about 1.5e-36) gets scale 0 and zeros.
    `baseline` runs the portable build even where an AVX2 one is used (i8_uses_avx2), so that
    tests check both."""
    cdef Py_ssize_t n = x.shape[0], c, start
    _i8_check(out.shape[0], n, chunk)
    with nogil:
        for c in range(_nchunks(n, chunk)):
            start = c * chunk
            _i8_encode_with(&x[start], &out[start + 4 * c], min(chunk, n - start), baseline)


def i8_uses_avx2():
    """True when i8_encode (and the wire path's int8 framing) runs its AVX2 build here."""
    return bool(_i8_uses_avx2())


def i8_decode(const u8[::1] p, float[::1] out, Py_ssize_t chunk):
    """out = scale * q, chunk by chunk, from what i8_encode wrote."""
    cdef Py_ssize_t n = out.shape[0], c, start
    _i8_check(p.shape[0], n, chunk)
    with nogil:
        for c in range(_nchunks(n, chunk)):
            start = c * chunk
            _decode_chunk(CODEC_I8, &p[start + 4 * c], &out[start], min(chunk, n - start))
