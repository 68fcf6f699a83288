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
# Encoded bytes sit at any offset inside a datagram, so they are read and written with memcpy.
# Every rounding is to nearest, ties to even, as NumPy's; tests compare the two bit for bit.

cdef inline uint32_t _bits(float f) noexcept nogil:
    cdef uint32_t x
    memcpy(&x, &f, 4)
    return x


cdef inline float _float(uint32_t x) noexcept nogil:
    cdef float f
    memcpy(&f, &x, 4)
    return f


cdef inline uint16_t _f2h(float f) noexcept nogil:
    cdef uint32_t x = _bits(f)
    cdef uint32_t sign = (x >> 16) & 0x8000u
    x &= 0x7FFFFFFFu
    if x > 0x7F800000u:
        return <uint16_t>(sign | 0x7E00u)                   # NaN stays NaN (receivers drop it)
    if x >= 0x477FE000u:
        return <uint16_t>(sign | 0x7BFFu)                   # 65504 and beyond: saturate
    if x >= 0x38800000u:                                    # normal: rebias, round the 13 bits
        x -= 0x38000000u
        x += 0xFFFu + ((x >> 13) & 1u)
        return <uint16_t>(sign | (x >> 13))
    # subnormal (or the smallest normal, 1024): scaling by 2^24 is exact, rintf rounds
    return <uint16_t>(sign | <uint32_t>rintf(_float(x) * <float>16777216.0))


cdef inline float _h2f(uint16_t h) noexcept nogil:
    cdef uint32_t sign = (<uint32_t>h & 0x8000u) << 16
    cdef uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu
    if e == 0:
        return _float(sign | _bits(<float>m * <float>5.9604644775390625e-08))  # m * 2^-24, exact
    if e == 31:
        return _float(sign | 0x7F800000u | (m << 13))
    return _float(sign | ((e + 112u) << 23) | (m << 13))


cdef inline uint16_t _f2bf(float f) noexcept nogil:
    cdef uint32_t x = _bits(f)
    if (x & 0x7FFFFFFFu) > 0x7F800000u:
        return <uint16_t>((x >> 16) | 0x40u)
    x += 0x7FFFu + ((x >> 16) & 1u)
    return <uint16_t>(x >> 16)


cdef int _encode16(const float[::1] x, u8[::1] out, bint brain) except -1:
    cdef Py_ssize_t i, n = x.shape[0]
    cdef uint16_t h
    if out.shape[0] < 2 * n:
        raise ValueError("out is shorter than 2 bytes an element")
    with nogil:
        for i in range(n):
            h = _f2bf(x[i]) if brain else _f2h(x[i])
            memcpy(&out[2 * i], &h, 2)
    return 0


cdef int _decode16(const u8[::1] p, float[::1] out, bint brain) except -1:
    cdef Py_ssize_t i, n = out.shape[0]
    cdef uint16_t h
    if p.shape[0] < 2 * n:
        raise ValueError("payload is shorter than 2 bytes an element")
    with nogil:
        for i in range(n):
            memcpy(&h, &p[2 * i], 2)
            out[i] = _float(<uint32_t>h << 16) if brain else _h2f(h)
    return 0


def f16_encode(const float[::1] x, u8[::1] out):
    """out (2 bytes an element, little-endian) = x as IEEE float16, saturated at +-65504."""
    _encode16(x, out, False)


def f16_decode(const u8[::1] p, float[::1] out):
    """out = the float16 values in p (2 bytes an element)."""
    _decode16(p, out, False)


def bf16_encode(const float[::1] x, u8[::1] out):
    """out (2 bytes an element) = x as bfloat16: the top 16 bits of float32, rounded."""
    _encode16(x, out, True)


def bf16_decode(const u8[::1] p, float[::1] out):
    """out = the bfloat16 values in p (2 bytes an element)."""
    _decode16(p, out, True)


cdef void _i8_encode(const float* x, u8* out, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef float amax = 0, a, scale, q
    cdef bint bad = False
    cdef signed char b
    for i in range(n):
        a = fabsf(x[i])
        if not a <= 3.4028234663852886e38:
            bad = True
        elif a > amax:
            amax = a
    scale = _float(0x7FC00000u) if bad else amax / <float>127.0
    memcpy(out, &scale, 4)
    for i in range(n):
        if bad or scale == 0:
            b = 0
        else:
            q = rintf(x[i] / scale)
            b = <signed char>(127 if q > 127 else (-127 if q < -127 else q))
        out[4 + i] = <u8>b


def i8_encode(const float[::1] x, u8[::1] out, Py_ssize_t chunk):
    """Per chunk of x (chunk elements, the last may be short): a float32 scale = max|x| / 127,
    then each element as round(x / scale) in int8, so out holds n + 4 * chunks bytes. A chunk
    holding NaN or Inf gets a NaN scale (receivers drop it) and zeros."""
    cdef Py_ssize_t n = x.shape[0], c, start, m
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if out.shape[0] < n + 4 * _nchunks(n, chunk):
        raise ValueError("out is shorter than the encoded chunks")
    with nogil:
        for c in range(_nchunks(n, chunk)):
            start = c * chunk
            m = chunk if start + chunk <= n else n - start
            _i8_encode(&x[start], &out[start + 4 * c], m)


def i8_decode(const u8[::1] p, float[::1] out, Py_ssize_t chunk):
    """out = scale * q, chunk by chunk, from what i8_encode wrote."""
    cdef Py_ssize_t n = out.shape[0], c, i, start, m, o
    cdef float scale
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if p.shape[0] < n + 4 * _nchunks(n, chunk):
        raise ValueError("payload is shorter than the encoded chunks")
    with nogil:
        for c in range(_nchunks(n, chunk)):
            start = c * chunk
            m = chunk if start + chunk <= n else n - start
            o = start + 4 * c
            memcpy(&scale, &p[o], 4)
            for i in range(m):
                out[start + i] = <float>(<signed char>p[o + 4 + i]) * scale
