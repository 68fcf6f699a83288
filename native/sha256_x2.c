/* See sha256_x2.h. The message schedule follows FIPS 180-4 section 6.2 as the SHA extensions
 * compute it: four message words per group, SHA256MSG1/MSG2 for sigma0/sigma1, and two
 * SHA256RNDS2 per group of four rounds on the (ABEF, CDGH) state halves. */
#include "sha256_x2.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

int eg_sha_ni_available(void)
{
    unsigned int a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    if (!(b & (1u << 29)))  /* CPUID.(EAX=7,ECX=0):EBX.SHA */
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c & (1u << 19)) && (c & (1u << 9));  /* SSE4.1, SSSE3 */
}

#define TARGET __attribute__((target("sha,sse4.1,ssse3")))

/* (H0..H7) <-> the (ABEF, CDGH) register layout SHA256RNDS2 works on */
TARGET static inline void load_state(const uint32_t s[8], __m128i *abef, __m128i *cdgh)
{
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&s[0]), 0xB1);
    __m128i u = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&s[4]), 0x1B);
    *abef = _mm_alignr_epi8(t, u, 8);
    *cdgh = _mm_blend_epi16(u, t, 0xF0);
}

TARGET static inline void store_state(uint32_t s[8], __m128i abef, __m128i cdgh)
{
    __m128i t = _mm_shuffle_epi32(abef, 0x1B);
    __m128i u = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&s[0], _mm_blend_epi16(t, u, 0xF0));
    _mm_storeu_si128((__m128i *)&s[4], _mm_alignr_epi8(u, t, 8));
}

/* One group of four rounds (i = 0..15) for one stream; m[] holds the four live schedule
 * vectors, m[i % 4] being this group's words. */
#define GROUP(i, m, abef, cdgh, data)                                                         \
    do {                                                                                      \
        __m128i w_;                                                                           \
        if ((i) < 4)                                                                          \
            m[(i)] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)((data) + 16 * (i))),  \
                                      bswap);                                                 \
        w_ = _mm_add_epi32(m[(i) & 3], _mm_loadu_si128((const __m128i *)&K[4 * (i)]));        \
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, w_);                                         \
        if ((i) >= 3 && (i) <= 14) {                                                          \
            m[((i) + 1) & 3] = _mm_add_epi32(m[((i) + 1) & 3],                                \
                                             _mm_alignr_epi8(m[(i) & 3], m[((i) + 3) & 3], 4)); \
            m[((i) + 1) & 3] = _mm_sha256msg2_epu32(m[((i) + 1) & 3], m[(i) & 3]);            \
        }                                                                                     \
        abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(w_, 0x0E));                \
        if ((i) >= 1 && (i) <= 12)                                                            \
            m[((i) + 3) & 3] = _mm_sha256msg1_epu32(m[((i) + 3) & 3], m[(i) & 3]);            \
    } while (0)

TARGET void eg_sha256_blocks(uint32_t state[8], const uint8_t *data, size_t blocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i abef, cdgh, m[4];
    load_state(state, &abef, &cdgh);
    for (; blocks; blocks--, data += 64) {
        __m128i abef0 = abef, cdgh0 = cdgh;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            GROUP(i, m, abef, cdgh, data);
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    store_state(state, abef, cdgh);
}

TARGET void eg_sha256_blocks_x2(uint32_t s0[8], const uint8_t *d0,
                                uint32_t s1[8], const uint8_t *d1, size_t blocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i a0, c0, a1, c1, m0[4], m1[4];
    load_state(s0, &a0, &c0);
    load_state(s1, &a1, &c1);
    for (; blocks; blocks--, d0 += 64, d1 += 64) {
        __m128i a0s = a0, c0s = c0, a1s = a1, c1s = c1;
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            GROUP(i, m0, a0, c0, d0);
            GROUP(i, m1, a1, c1, d1);
        }
        a0 = _mm_add_epi32(a0, a0s);
        c0 = _mm_add_epi32(c0, c0s);
        a1 = _mm_add_epi32(a1, a1s);
        c1 = _mm_add_epi32(c1, c1s);
    }
    store_state(s0, a0, c0);
    store_state(s1, a1, c1);
}

#define HAVE_SHA_NI_CODE 1

#else  /* not x86-64: _wire_c uses OpenSSL's SHA-256 */

int eg_sha_ni_available(void) { return 0; }
void eg_sha256_blocks(uint32_t state[8], const uint8_t *data, size_t blocks)
{
    (void)state; (void)data; (void)blocks;
}
void eg_sha256_blocks_x2(uint32_t s0[8], const uint8_t *d0, uint32_t s1[8], const uint8_t *d1,
                         size_t blocks)
{
    (void)s0; (void)d0; (void)s1; (void)d1; (void)blocks;
}

#endif

#ifdef HAVE_SHA_NI_CODE
#include <string.h>

static const uint32_t IV[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

/* Final padded block(s) of a message whose last `rem` bytes are at tail; total counts every
 * byte hashed, key block included. Returns 1 or 2 blocks. */
static size_t pad_tail(uint8_t out[128], const uint8_t *tail, size_t rem, uint64_t total)
{
    size_t nb = rem + 9 <= 64 ? 1 : 2;
    uint64_t bits = total * 8;
    memmove(out, tail, rem);
    out[rem] = 0x80;
    memset(out + rem + 1, 0, nb * 64 - rem - 1);
    for (int i = 0; i < 8; i++)
        out[nb * 64 - 1 - i] = (uint8_t)(bits >> (8 * i));
    return nb;
}

static void digest_be(const uint32_t st[8], uint8_t out[32])
{
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(st[i] >> 24);
        out[4 * i + 1] = (uint8_t)(st[i] >> 16);
        out[4 * i + 2] = (uint8_t)(st[i] >> 8);
        out[4 * i + 3] = (uint8_t)st[i];
    }
}

void eg_hmac_key(const uint8_t *key, size_t len, uint32_t inner[8], uint32_t outer[8])
{
    uint8_t block[64] = {0}, pad[128];
    if (len > 64) {
        uint32_t st[8];
        memcpy(st, IV, sizeof st);
        eg_sha256_blocks(st, key, len / 64);
        eg_sha256_blocks(st, pad, pad_tail(pad, key + len / 64 * 64, len % 64, len));
        digest_be(st, block);
    } else if (len) {
        memcpy(block, key, len);
    }
    for (int i = 0; i < 64; i++)
        pad[i] = block[i] ^ 0x36;
    memcpy(inner, IV, 32);
    eg_sha256_blocks(inner, pad, 1);
    for (int i = 0; i < 64; i++)
        pad[i] = block[i] ^ 0x5c;
    memcpy(outer, IV, 32);
    eg_sha256_blocks(outer, pad, 1);
}

static void outer_block(uint8_t blk[64], const uint32_t st[8])
{
    digest_be(st, blk);
    pad_tail(blk, blk, 32, 64 + 32);
}

void eg_hmac_tag(const uint32_t inner[8], const uint32_t outer[8],
                 const uint8_t *msg, size_t len, uint8_t tag[32])
{
    uint32_t st[8];
    uint8_t tail[128];
    memcpy(st, inner, 32);
    eg_sha256_blocks(st, msg, len / 64);
    eg_sha256_blocks(st, tail, pad_tail(tail, msg + len / 64 * 64, len % 64, 64 + len));
    outer_block(tail, st);
    memcpy(st, outer, 32);
    eg_sha256_blocks(st, tail, 1);
    digest_be(st, tag);
}

void eg_hmac_tag_x2(const uint32_t inner[8], const uint32_t outer[8],
                    const uint8_t *m0, size_t n0, uint8_t t0[32],
                    const uint8_t *m1, size_t n1, uint8_t t1[32])
{
    uint32_t a[8], b[8];
    uint8_t p0[128], p1[128];
    size_t f0 = n0 / 64, f1 = n1 / 64, f = f0 < f1 ? f0 : f1, k0, k1;
    memcpy(a, inner, 32);
    memcpy(b, inner, 32);
    eg_sha256_blocks_x2(a, m0, b, m1, f);
    eg_sha256_blocks(a, m0 + 64 * f, f0 - f);
    eg_sha256_blocks(b, m1 + 64 * f, f1 - f);
    k0 = pad_tail(p0, m0 + 64 * f0, n0 % 64, 64 + n0);
    k1 = pad_tail(p1, m1 + 64 * f1, n1 % 64, 64 + n1);
    if (k0 == k1) {
        eg_sha256_blocks_x2(a, p0, b, p1, k0);
    } else {
        eg_sha256_blocks(a, p0, k0);
        eg_sha256_blocks(b, p1, k1);
    }
    outer_block(p0, a);
    outer_block(p1, b);
    memcpy(a, outer, 32);
    memcpy(b, outer, 32);
    eg_sha256_blocks_x2(a, p0, b, p1, 1);
    digest_be(a, t0);
    digest_be(b, t1);
}

#else

void eg_hmac_key(const uint8_t *key, size_t len, uint32_t inner[8], uint32_t outer[8])
{
    (void)key; (void)len; (void)inner; (void)outer;
}
void eg_hmac_tag(const uint32_t inner[8], const uint32_t outer[8],
                 const uint8_t *msg, size_t len, uint8_t tag[32])
{
    (void)inner; (void)outer; (void)msg; (void)len; (void)tag;
}
void eg_hmac_tag_x2(const uint32_t inner[8], const uint32_t outer[8],
                    const uint8_t *m0, size_t n0, uint8_t t0[32],
                    const uint8_t *m1, size_t n1, uint8_t t1[32])
{
    (void)inner; (void)outer; (void)m0; (void)n0; (void)t0; (void)m1; (void)n1; (void)t1;
}

#endif
