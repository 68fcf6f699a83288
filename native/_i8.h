/* The int8 payload encoder of one chunk (native/_codec.pxi declares it; edgegossip/_kernels_py.py
 * is its NumPy twin, and the tests compare both builds below with it bit for bit).
 *
 * A sender encodes every datagram it sends, so this loop runs per byte on the wire. It is C so
 * that x86-64 builds carry an AVX2 build beside the baseline (SSE2) one: SSE2 has no 32-bit
 * integer max, and its emulation made the encoder cost twice the datagram's ChaCha20-Poly1305
 * tag. Both loops are written so that compilers vectorise them on any target, NEON included. */
#ifndef EDGEGOSSIP_I8_H
#define EDGEGOSSIP_I8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define EG_I8_AVX2 1
#endif

static inline uint32_t eg_i8_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float eg_i8_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* out[0:4] = scale (float32, max|x| / 127), out[4:4 + n] = round(x * (1 / scale)) as int8,
 * rounding half to even. NaN or Inf in x: a NaN scale and zeros. A scale below the smallest
 * normal float (1 / scale would overflow): scale 0 and zeros. */
static inline __attribute__((always_inline)) void
eg_i8_encode_body(const float *x, uint8_t *out, ptrdiff_t n)
{
    /* max|x| on the bits: a non-negative float's bits order as its value does, and Inf and NaN
     * are the patterns from 0x7F800000 up, so one integer max also finds them */
    int32_t top = 0;
    for (ptrdiff_t i = 0; i < n; i++) {
        int32_t b = (int32_t)(eg_i8_bits(x[i]) & 0x7FFFFFFFu);
        top = b > top ? b : top;
    }
    int bad = top >= 0x7F800000;
    float scale = bad ? eg_i8_float(0x7FC00000u) : eg_i8_float((uint32_t)top) / 127.0f;
    if (scale < 1.17549435e-38f)
        scale = 0.0f;
    memcpy(out, &scale, 4);
    if (bad || scale == 0.0f) {
        memset(out + 4, 0, (size_t)n);
        return;
    }
    const float inv = 1.0f / scale;
    /* read from a volatile: with the constant in the sum GCC 12 no longer vectorises the loop */
    volatile float magic = 12582912.0f;
    const float m = magic;
    uint8_t *q = out + 4;
    for (ptrdiff_t i = 0; i < n; i++) {
        /* clamp, then round by adding 1.5 * 2^23: the sum's low mantissa bits are then the
         * integer, rounded half to even, for any |v| < 2^22. Clamping first gives what rounding
         * first and clamping after would: |v| > 127 ends at +-127 either way. */
        float v = x[i] * inv;
        v = v < 127.0f ? v : 127.0f;
        v = v > -127.0f ? v : -127.0f;
        q[i] = (uint8_t)(eg_i8_bits(v + m) - 0x4B400000u);
    }
}

static void eg_i8_encode_baseline(const float *x, uint8_t *out, ptrdiff_t n)
{
    eg_i8_encode_body(x, out, n);
}

#ifdef EG_I8_AVX2
__attribute__((target("avx2"))) static void
eg_i8_encode_avx2(const float *x, uint8_t *out, ptrdiff_t n)
{
    eg_i8_encode_body(x, out, n);
}
#endif

/* 1 when eg_i8_encode runs the AVX2 build on this CPU */
static inline int eg_i8_uses_avx2(void)
{
#ifdef EG_I8_AVX2
    __builtin_cpu_init();  /* idempotent; needed when called before libgcc's constructors ran */
    return __builtin_cpu_supports("avx2") != 0;
#else
    return 0;
#endif
}

/* the baseline build when `baseline` is set (tests), else the best this CPU runs */
static inline void eg_i8_encode_with(const float *x, uint8_t *out, ptrdiff_t n, int baseline)
{
#ifdef EG_I8_AVX2
    if (!baseline && __builtin_cpu_supports("avx2")) {
        eg_i8_encode_avx2(x, out, n);
        return;
    }
#endif
    eg_i8_encode_baseline(x, out, n);
}

static inline void eg_i8_encode(const float *x, uint8_t *out, ptrdiff_t n)
{
    eg_i8_encode_with(x, out, n, 0);
}

#endif
