/* SHA-256 compression on x86 SHA extensions, one stream or two interleaved.
 *
 * One SHA-256 stream on SHA-NI is bound by the latency of SHA256RNDS2, not its throughput, so
 * two independent messages hashed in the same instruction stream cost little more than one.
 * Both ends of the data plane tag or verify a batch of datagrams at a time, which gives the
 * pairs. Only the compression function lives here; HMAC and padding are in _wire_c.pyx, and
 * tests/test_fast_path.py checks every length against hashlib.
 */
#ifndef EDGEGOSSIP_SHA256_X2_H
#define EDGEGOSSIP_SHA256_X2_H

#include <stddef.h>
#include <stdint.h>

/* 1 when this CPU has the SHA extensions (and this build targets x86-64), else 0. */
int eg_sha_ni_available(void);

/* Absorb `blocks` 64-byte blocks of `data` into state (eight words, H0..H7). */
void eg_sha256_blocks(uint32_t state[8], const uint8_t *data, size_t blocks);

/* The same for two independent streams of equal length, interleaved. */
void eg_sha256_blocks_x2(uint32_t s0[8], const uint8_t *d0,
                         uint32_t s1[8], const uint8_t *d1, size_t blocks);

/* HMAC-SHA256 on top of the compression function (RFC 2104). eg_hmac_key derives the inner
 * and outer states once per key; eg_hmac_tag and eg_hmac_tag_x2 give full 32-byte tags. */
void eg_hmac_key(const uint8_t *key, size_t len, uint32_t inner[8], uint32_t outer[8]);
void eg_hmac_tag(const uint32_t inner[8], const uint32_t outer[8],
                 const uint8_t *msg, size_t len, uint8_t tag[32]);
void eg_hmac_tag_x2(const uint32_t inner[8], const uint32_t outer[8],
                    const uint8_t *m0, size_t n0, uint8_t t0[32],
                    const uint8_t *m1, size_t n1, uint8_t t1[32]);

#endif
