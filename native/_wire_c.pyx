# Compiled per-datagram path of the wire format (edgegossip/wire.py documents the layout).
#
# At 8 KB datagrams the Python path spends most of its time on interpreter overhead around the
# HMAC, not in it, so a sender or receiver tops out far below what a socket moves. This module
# frames and tags a batch of chunks, and files a run of datagrams into a receive slot, with the
# GIL released and the HMAC keyed once (the ipad/opad SHA-256 states are precomputed and copied
# per message, as RFC 2104 permits). Python keeps every decision that is not the steady state:
# ingest_run() only accepts, and stops at the first datagram it would not accept unchanged, so
# edgegossip/inbox.py's Python path stays the single definition of what is dropped and why.

from libc.string cimport memcmp, memcpy, memset
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t

cdef extern from "<openssl/sha.h>" nogil:
    ctypedef struct SHA256_CTX:
        pass
    int SHA256_Init(SHA256_CTX *c)
    int SHA256_Update(SHA256_CTX *c, const void *data, size_t n)
    int SHA256_Final(unsigned char *md, SHA256_CTX *c)
    unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md)

cdef extern from "sha256_x2.h" nogil:
    int eg_sha_ni_available()
    void eg_hmac_key(const uint8_t *key, size_t len, uint32_t inner[8], uint32_t outer[8])
    void eg_hmac_tag(const uint32_t inner[8], const uint32_t outer[8], const uint8_t *msg,
                     size_t len, uint8_t tag[32])
    void eg_hmac_tag_x2(const uint32_t inner[8], const uint32_t outer[8],
                        const uint8_t *m0, size_t n0, uint8_t t0[32],
                        const uint8_t *m1, size_t n1, uint8_t t1[32])

DEF HEADER_SIZE = 48
DEF TAG_SIZE = 16
DEF VERSION = 2
DEF DTYPE_F32 = 1
DEF BLOCK = 64


cdef inline uint32_t _le32(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint16_t _le16(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint16_t>p[1] << 8)


cdef inline uint64_t _le64(const uint8_t *p) noexcept nogil:
    return _le32(p) | (<uint64_t>_le32(p + 4) << 32)


cdef inline void _put32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = v & 0xff
    p[1] = (v >> 8) & 0xff
    p[2] = (v >> 16) & 0xff
    p[3] = (v >> 24) & 0xff


cdef inline void _put16(uint8_t *p, uint16_t v) noexcept nogil:
    p[0] = v & 0xff
    p[1] = (v >> 8) & 0xff


cdef inline void _put64(uint8_t *p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v & 0xffffffffu))
    _put32(p + 4, <uint32_t>(v >> 32))


cdef inline bint _finite(const uint8_t *p, Py_ssize_t nbytes) noexcept nogil:
    # a float32 is NaN or Inf exactly when its eight exponent bits are all set; payloads sit at
    # odd offsets in a row, hence memcpy (an unaligned load the compiler vectorises)
    cdef Py_ssize_t i
    cdef uint32_t w, bad = 0
    for i in range(0, nbytes // 4):
        memcpy(&w, p + 4 * i, 4)
        bad |= (w & 0x7f800000u) == 0x7f800000u
    return not bad


cdef class Hmac:
    """HMAC-SHA256 with a fixed key, truncated to TAG_SIZE bytes (wire.make_tag). On x86-64
    with SHA extensions it runs native/sha256_x2.c and tags two messages at once; elsewhere,
    or with accelerated=False, OpenSSL's SHA-256."""
    cdef SHA256_CTX inner
    cdef SHA256_CTX outer
    cdef uint32_t istate[8]
    cdef uint32_t ostate[8]
    cdef readonly bint accelerated

    def __init__(self, const uint8_t[::1] key not None, accelerated=None):
        cdef uint8_t block[BLOCK]
        cdef uint8_t pad[BLOCK]
        cdef Py_ssize_t i
        self.accelerated = eg_sha_ni_available() if accelerated is None else (
            bool(accelerated) and eg_sha_ni_available())
        if self.accelerated:
            eg_hmac_key(&key[0] if key.shape[0] else NULL, key.shape[0], self.istate, self.ostate)
            return
        memset(block, 0, BLOCK)
        if key.shape[0] > BLOCK:
            SHA256(&key[0], key.shape[0], block)
        elif key.shape[0] > 0:
            memcpy(block, &key[0], key.shape[0])
        for i in range(BLOCK):
            pad[i] = block[i] ^ 0x36
        SHA256_Init(&self.inner)
        SHA256_Update(&self.inner, pad, BLOCK)
        for i in range(BLOCK):
            pad[i] = block[i] ^ 0x5c
        SHA256_Init(&self.outer)
        SHA256_Update(&self.outer, pad, BLOCK)

    cdef void tag(self, const uint8_t *msg, size_t n, uint8_t *out) noexcept nogil:
        cdef SHA256_CTX ctx
        cdef uint8_t digest[32]
        if self.accelerated:
            eg_hmac_tag(self.istate, self.ostate, msg, n, digest)
        else:
            memcpy(&ctx, &self.inner, sizeof(SHA256_CTX))
            SHA256_Update(&ctx, msg, n)
            SHA256_Final(digest, &ctx)
            memcpy(&ctx, &self.outer, sizeof(SHA256_CTX))
            SHA256_Update(&ctx, digest, 32)
            SHA256_Final(digest, &ctx)
        memcpy(out, digest, TAG_SIZE)

    cdef void tag2(self, const uint8_t *m0, size_t n0, uint8_t *out0,
                   const uint8_t *m1, size_t n1, uint8_t *out1) noexcept nogil:
        cdef uint8_t d0[32]
        cdef uint8_t d1[32]
        if self.accelerated:
            eg_hmac_tag_x2(self.istate, self.ostate, m0, n0, d0, m1, n1, d1)
            memcpy(out0, d0, TAG_SIZE)
            memcpy(out1, d1, TAG_SIZE)
        else:
            self.tag(m0, n0, out0)
            self.tag(m1, n1, out1)

    def digest(self, const uint8_t[::1] msg not None) -> bytes:
        """The tag of msg (for tests against hmac.digest)."""
        cdef uint8_t out[TAG_SIZE]
        with nogil:
            self.tag(&msg[0] if msg.shape[0] else NULL, msg.shape[0], out)
        return out[:TAG_SIZE]

    def digest2(self, const uint8_t[::1] a not None, const uint8_t[::1] b not None) -> tuple:
        """The tags of a and b, computed together (for tests)."""
        cdef uint8_t ta[TAG_SIZE]
        cdef uint8_t tb[TAG_SIZE]
        with nogil:
            self.tag2(&a[0] if a.shape[0] else NULL, a.shape[0], ta,
                      &b[0] if b.shape[0] else NULL, b.shape[0], tb)
        return ta[:TAG_SIZE], tb[:TAG_SIZE]


cdef inline bint _same(const uint8_t *a, const uint8_t *b) noexcept nogil:
    # constant time, like hmac.compare_digest
    cdef uint8_t diff = 0
    cdef int i
    for i in range(TAG_SIZE):
        diff |= a[i] ^ b[i]
    return diff == 0


def frame_batch(Hmac mac not None, const uint8_t[::1] model not None, uint8_t[:, ::1] rows not None,
                Py_ssize_t[::1] lengths not None, const uint8_t[::1] prefix not None,
                int msg_type, int flags, uint32_t fleet, uint16_t sender, uint16_t receiver,
                uint16_t block, uint32_t session, uint32_t round,
                Py_ssize_t first_chunk, Py_ssize_t stop_chunk, uint32_t n_chunks,
                Py_ssize_t chunk_bytes, uint64_t seq0):
    """Frame chunks first_chunk.. of model (the flat vector's bytes) into rows, as many as fit
    in rows and below stop_chunk; row k gets sequence number seq0 + k. The tag covers the group
    framing too. Returns how many."""
    cdef Py_ssize_t plen = prefix.shape[0], mbytes = model.shape[0]
    cdef Py_ssize_t count = stop_chunk - first_chunk, k, off, n, m
    cdef uint8_t *h
    if count > rows.shape[0]:
        count = rows.shape[0]
    if count <= 0:
        return 0
    if lengths.shape[0] < count:
        raise ValueError("lengths shorter than the batch")
    if first_chunk < 0 or stop_chunk > n_chunks or chunk_bytes <= 0 or chunk_bytes % 4:
        raise ValueError("chunk range outside the model")
    if rows.shape[1] < plen + HEADER_SIZE + chunk_bytes + TAG_SIZE:
        raise ValueError("rows too narrow for a datagram")
    if <Py_ssize_t>(n_chunks - 1) * chunk_bytes >= mbytes or <Py_ssize_t>n_chunks * chunk_bytes < mbytes:
        raise ValueError("n_chunks does not match the model size")
    with nogil:
        for k in range(count):
            off = (first_chunk + k) * chunk_bytes
            n = chunk_bytes if off + chunk_bytes <= mbytes else mbytes - off
            memcpy(&rows[k, 0], &prefix[0], plen)
            h = &rows[k, plen]
            h[0] = VERSION
            h[1] = msg_type
            h[2] = DTYPE_F32
            h[3] = flags
            _put32(h + 4, fleet)
            _put16(h + 8, sender)
            _put16(h + 10, receiver)
            _put16(h + 12, block)
            _put16(h + 14, 0)
            _put32(h + 16, session)
            _put32(h + 20, round)
            _put32(h + 24, <uint32_t>(first_chunk + k))
            _put32(h + 28, n_chunks)
            _put32(h + 32, <uint32_t>off)
            _put32(h + 36, <uint32_t>n)
            _put64(h + 40, seq0 + k)
            memcpy(h + HEADER_SIZE, &model[off], n)
            lengths[k] = plen + HEADER_SIZE + n + TAG_SIZE
        k = 0
        while k < count:
            h = &rows[k, 0]
            n = lengths[k] - TAG_SIZE
            if k + 1 < count:
                m = lengths[k + 1] - TAG_SIZE
                mac.tag2(h, n, h + n, &rows[k + 1, 0], m, &rows[k + 1, 0] + m)
                k += 2
            else:
                mac.tag(h, n, h + n)
                k += 1
    return count


cdef inline Py_ssize_t _steady(const uint8_t *d, Py_ssize_t n, const uint8_t *prefix,
                               Py_ssize_t plen, uint32_t fleet, int me, int sender, int msg_type,
                               uint32_t session, uint32_t round, int64_t highest, int64_t limit,
                               Py_ssize_t n_chunks, Py_ssize_t chunk_bytes, Py_ssize_t mbytes,
                               Py_ssize_t max_body) noexcept nogil:
    """Payload length if the datagram d (n bytes, framed) passes every check but the tag and
    finiteness for this slot, its sequence number in (highest, limit], else -1."""
    cdef const uint8_t *h = d + plen
    cdef Py_ssize_t length, c, off
    cdef uint64_t seq
    n -= plen
    if n < HEADER_SIZE + TAG_SIZE or n > max_body or memcmp(d, prefix, plen) != 0:
        return -1
    length = _le32(h + 36)
    if (h[0] != VERSION or h[1] != msg_type or h[2] != DTYPE_F32 or length % 4
            or HEADER_SIZE + length + TAG_SIZE != n or _le32(h + 4) != fleet
            or _le16(h + 8) != sender or _le16(h + 10) != me or _le16(h + 14) != 0
            or _le32(h + 16) != session or _le32(h + 20) != round):
        return -1
    seq = _le64(h + 40)
    if seq > <uint64_t>0x7fffffffffffffff or <int64_t>seq <= highest or <int64_t>seq > limit:
        return -1
    c = _le32(h + 24)
    off = _le32(h + 32)
    if (_le32(h + 28) != n_chunks or c >= n_chunks or off != c * chunk_bytes
            or length != (chunk_bytes if off + chunk_bytes <= mbytes else mbytes - off)):
        return -1
    return length


cdef class Run:
    """Files runs of one receive batch into one receive slot. Built once per receive batch
    array (rows, lengths and the group prefix are the transport's, reused for every batch),
    pointed at a slot with target(), then run() per batch: typed views are acquired here once,
    not per call, which at small batches would cost more than the datagrams."""
    cdef Hmac mac
    cdef const uint8_t[:, ::1] rows
    cdef const Py_ssize_t[::1] lengths
    cdef const uint8_t[::1] prefix
    cdef uint8_t[::1] buf
    cdef uint8_t[::1] mask
    cdef int64_t[::1] seqv
    cdef Py_ssize_t chunk_bytes, max_body
    cdef readonly object seqs
    cdef readonly int64_t fresh, nbytes
    cdef readonly object rows_obj

    def __init__(self, Hmac mac not None, rows not None, lengths not None, prefix not None,
                 Py_ssize_t chunk_bytes, Py_ssize_t max_body, seqs not None):
        self.mac = mac
        self.rows = rows
        self.rows_obj = rows
        self.lengths = lengths
        self.prefix = prefix
        self.seqs = seqs
        self.seqv = seqs
        if self.prefix.shape[0] == 0 or max_body + self.prefix.shape[0] > self.rows.shape[1]:
            raise ValueError("rows too narrow for the largest datagram")
        if self.lengths.shape[0] < self.rows.shape[0] or self.seqv.shape[0] < self.rows.shape[0]:
            raise ValueError("lengths or seqs shorter than the batch")
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        self.chunk_bytes = chunk_bytes
        self.max_body = max_body

    def target(self, uint8_t[::1] buf not None, uint8_t[::1] mask not None):
        """Point run() at a slot: the model-sized byte buffer and its chunk mask."""
        if mask.shape[0] * self.chunk_bytes < buf.shape[0]:
            raise ValueError("mask too short for the buffer")
        self.buf = buf
        self.mask = mask

    def peek(self, Py_ssize_t i):
        """(sender, msg_type, session, round) from the unauthenticated header of row i, or None
        if it is too short to hold one; only used to choose which slot run() should try."""
        cdef Py_ssize_t plen = self.prefix.shape[0]
        cdef const uint8_t *h
        if not 0 <= i < self.rows.shape[0] or self.lengths[i] < plen + HEADER_SIZE + TAG_SIZE:
            return None
        h = &self.rows[i, plen]
        return _le16(h + 8), h[1], _le32(h + 16), _le32(h + 20)

    def run(self, Py_ssize_t start, Py_ssize_t stop, uint32_t fleet, int me, int sender,
            int msg_type, uint32_t session, uint32_t round, int64_t highest, int64_t limit):
        """Accept rows start, start+1, .. while each one is, unchanged, a datagram the Python
        inbox would accept into the target slot of (sender, msg_type, session, round): group,
        size, version, type, dtype, fleet, receiver and tag valid, sequence above `highest`,
        rising and at most `limit`, chunk geometry exact, payload finite. Each accepted payload is copied into the slot and its
        mask byte set. Stops at the first other row, touching nothing for it. Returns how many
        were accepted; their sequence numbers are seqs[:k]; fresh counts chunks new to the
        mask, nbytes the payload bytes."""
        cdef Py_ssize_t plen = self.prefix.shape[0], i, c, off, length, nxt
        cdef Py_ssize_t mbytes, n_chunks, accepted = 0
        cdef Py_ssize_t chunk_bytes = self.chunk_bytes, max_body = self.max_body
        cdef Py_ssize_t checked = -1  # row whose tag was verified along with the row before it
        cdef bint tag_ok, checked_ok = False
        cdef int64_t fresh = 0, nbytes = 0
        cdef const uint8_t *h
        cdef const uint8_t *h2
        cdef const uint8_t *pre = &self.prefix[0]
        cdef uint8_t want[TAG_SIZE]
        cdef uint8_t want2[TAG_SIZE]
        cdef Hmac mac = self.mac
        if self.buf is None:
            raise ValueError("target() first")
        mbytes = self.buf.shape[0]
        n_chunks = self.mask.shape[0]
        if start < 0 or stop > self.rows.shape[0]:
            raise ValueError("rows outside the batch")
        with nogil:
            for i in range(start, stop):
                length = _steady(&self.rows[i, 0], self.lengths[i], pre, plen, fleet, me, sender,
                                 msg_type, session, round, highest, limit, n_chunks, chunk_bytes,
                                 mbytes, max_body)
                if length < 0:
                    break
                h = &self.rows[i, plen]
                if checked == i:
                    tag_ok = checked_ok
                else:
                    # verify the next row's tag together with this one's when it looks like it
                    # continues the run: two SHA-256 streams cost little more than one
                    nxt = -1
                    if i + 1 < stop:
                        nxt = _steady(&self.rows[i + 1, 0], self.lengths[i + 1], pre, plen, fleet,
                                      me, sender, msg_type, session, round,
                                      <int64_t>_le64(h + 40), limit, n_chunks, chunk_bytes,
                                      mbytes, max_body)
                    # the tag covers the group framing: hash from the row's first byte
                    if nxt >= 0:
                        h2 = &self.rows[i + 1, plen]
                        mac.tag2(h - plen, plen + HEADER_SIZE + length, want,
                                 h2 - plen, plen + HEADER_SIZE + nxt, want2)
                        checked = i + 1
                        checked_ok = _same(want2, h2 + HEADER_SIZE + nxt)
                    else:
                        mac.tag(h - plen, plen + HEADER_SIZE + length, want)
                    tag_ok = _same(want, h + HEADER_SIZE + length)
                if not tag_ok or not _finite(h + HEADER_SIZE, length):
                    break
                c = _le32(h + 24)
                off = _le32(h + 32)
                memcpy(&self.buf[off], h + HEADER_SIZE, length)
                fresh += self.mask[c] == 0
                self.mask[c] = 1
                highest = <int64_t>_le64(h + 40)
                self.seqv[accepted] = highest
                accepted += 1
                nbytes += length
        self.fresh = fresh
        self.nbytes = nbytes
        return accepted
