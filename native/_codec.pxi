# Payload codecs shared by _kernels_c.pyx (the kernels and their tests) and _wire_c.pyx (the
# datagram fast path), included textually by both. Encoded bytes sit at any offset inside a
# datagram, so they are read and written with memcpy. Every rounding is to nearest, ties to
# even, as NumPy's (edgegossip/_kernels_py.py); tests compare the two bit for bit.

from libc.string cimport memcpy, memset
from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t
from libc.math cimport rintf, fabsf

DEF CODEC_F32 = 1
DEF CODEC_F16 = 2
DEF CODEC_BF16 = 3
DEF CODEC_I8 = 4


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


cdef extern from "_i8.h" nogil:
    # int8 encoding of one chunk, in C for its AVX2 build on x86-64 (the header says why)
    void _i8_encode "eg_i8_encode"(const float* x, uint8_t* out, Py_ssize_t n) noexcept
    void _i8_encode_with "eg_i8_encode_with"(const float* x, uint8_t* out, Py_ssize_t n,
                                             int baseline) noexcept
    int _i8_uses_avx2 "eg_i8_uses_avx2"() noexcept


cdef inline Py_ssize_t _encoded_len(int dtype, Py_ssize_t n) noexcept nogil:
    """Bytes that n elements take in a datagram: wire.py's dtype codes (payload.py)."""
    if dtype == CODEC_F16 or dtype == CODEC_BF16:
        return 2 * n
    if dtype == CODEC_I8:
        return 4 + n
    return 4 * n


cdef void _encode_chunk(int dtype, const float* x, uint8_t* out, Py_ssize_t n) noexcept nogil:
    """One datagram's payload from n parameters (float32 is copied as it is)."""
    cdef Py_ssize_t i
    cdef uint16_t h
    if dtype == CODEC_I8:
        _i8_encode(x, out, n)
    elif dtype == CODEC_F16 or dtype == CODEC_BF16:
        for i in range(n):
            h = _f2bf(x[i]) if dtype == CODEC_BF16 else _f2h(x[i])
            memcpy(out + 2 * i, &h, 2)
    else:
        memcpy(out, x, 4 * n)


cdef void _decode_chunk(int dtype, const uint8_t* p, float* out, Py_ssize_t n) noexcept nogil:
    """n parameters from one datagram's payload."""
    cdef Py_ssize_t i
    cdef uint16_t h
    cdef float scale
    if dtype == CODEC_I8:
        memcpy(&scale, p, 4)
        for i in range(n):
            out[i] = <float>(<signed char>p[4 + i]) * scale
    elif dtype == CODEC_F16 or dtype == CODEC_BF16:
        for i in range(n):
            memcpy(&h, p + 2 * i, 2)
            out[i] = _float(<uint32_t>h << 16) if dtype == CODEC_BF16 else _h2f(h)
    else:
        memcpy(out, p, 4 * n)
