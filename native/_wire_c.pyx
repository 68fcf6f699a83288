# Compiled per-datagram path of the wire format (edgegossip/dataplane/wire.py documents the
# layout, edgegossip/dataplane/aead.py the AEAD).
#
# At 8 KB datagrams the Python path spends most of its time on interpreter overhead around the
# AEAD, not in it, so a sender or receiver tops out far below what a socket moves. This module
# frames and seals a batch of chunks, and files a run of datagrams into a receive slot, with the
# GIL released and each link's ChaCha20-Poly1305 context keyed once (OpenSSL's EVP; per
# datagram only the nonce is set). Python keeps every decision that is not the steady state:
# Run.run() only accepts, and stops at the first of its sender's datagrams it would not accept
# unchanged, so edgegossip/dataplane/inbox.py's Python path stays the single definition of what
# is dropped.

import numpy as np

from libc.string cimport memcmp, memcpy
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t

cdef extern from "<openssl/evp.h>" nogil:
    ctypedef struct EVP_CIPHER_CTX:
        pass
    ctypedef struct EVP_CIPHER:
        pass
    ctypedef struct EVP_MD:
        pass
    EVP_CIPHER_CTX *EVP_CIPHER_CTX_new()
    void EVP_CIPHER_CTX_free(EVP_CIPHER_CTX *c)
    const EVP_CIPHER *EVP_chacha20_poly1305()
    const EVP_MD *EVP_sha256()
    int EVP_EncryptInit_ex(EVP_CIPHER_CTX *c, const EVP_CIPHER *t, void *impl,
                           const unsigned char *key, const unsigned char *iv)
    int EVP_DecryptInit_ex(EVP_CIPHER_CTX *c, const EVP_CIPHER *t, void *impl,
                           const unsigned char *key, const unsigned char *iv)
    int EVP_EncryptUpdate(EVP_CIPHER_CTX *c, unsigned char *out, int *outl,
                          const unsigned char *inp, int inl)
    int EVP_DecryptUpdate(EVP_CIPHER_CTX *c, unsigned char *out, int *outl,
                          const unsigned char *inp, int inl)
    int EVP_EncryptFinal_ex(EVP_CIPHER_CTX *c, unsigned char *out, int *outl)
    int EVP_DecryptFinal_ex(EVP_CIPHER_CTX *c, unsigned char *out, int *outl)
    int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX *c, int type, int arg, void *ptr)
    int EVP_CTRL_AEAD_GET_TAG
    int EVP_CTRL_AEAD_SET_TAG

cdef extern from "<openssl/hmac.h>" nogil:
    unsigned char *HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d,
                        size_t n, unsigned char *md_out, unsigned int *md_len)

DEF HEADER_SIZE = 48
DEF TAG_SIZE = 16
DEF VERSION = 4
DEF DTYPE_F32 = 1
DEF FLAG_ENCRYPTED = 2
DEF MAX_PAYLOAD = 65536

include "_codec.pxi"
include "_sendrows.pxi"


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


cdef inline bint _i8_products_finite(const uint8_t *p) noexcept nogil:
    # an int8 payload's scale s, if 128 * |s| rounds to a finite float: then so does every
    # q * s (|q| <= 128; rounding is monotonic), and the decoded chunk needs no check of its own
    cdef float scale
    memcpy(&scale, p, 4)
    return fabsf(scale) * <float>128.0 <= <float>3.4028234663852886e38


cdef inline void _nonce(const uint8_t *h, uint8_t *out) noexcept nogil:
    # (session, seq) of the header: unique per link key (aead.nonce)
    memcpy(out, h + 16, 4)
    memcpy(out + 4, h + 40, 8)


cdef class Aead:
    """ChaCha20-Poly1305 (RFC 8439) under one 32-byte key, OpenSSL's; the same methods as
    edgegossip.dataplane.aead.PyAead. Not thread-safe: one per link and thread."""
    cdef EVP_CIPHER_CTX *enc
    cdef EVP_CIPHER_CTX *dec

    def __cinit__(self, const uint8_t[::1] key not None):
        if key.shape[0] != 32:
            raise ValueError("a link key is 32 bytes")
        self.enc = EVP_CIPHER_CTX_new()
        self.dec = EVP_CIPHER_CTX_new()
        if (self.enc == NULL or self.dec == NULL
                or EVP_EncryptInit_ex(self.enc, EVP_chacha20_poly1305(), NULL, &key[0], NULL) != 1
                or EVP_DecryptInit_ex(self.dec, EVP_chacha20_poly1305(), NULL, &key[0], NULL) != 1):
            raise MemoryError("OpenSSL could not set up ChaCha20-Poly1305")

    def __dealloc__(self):
        EVP_CIPHER_CTX_free(self.enc)
        EVP_CIPHER_CTX_free(self.dec)

    cdef bint seal_raw(self, const uint8_t *nonce, const uint8_t *aad, Py_ssize_t naad,
                       const uint8_t *pt, uint8_t *ct, Py_ssize_t n,
                       uint8_t *tag) noexcept nogil:
        cdef int outl
        return (EVP_EncryptInit_ex(self.enc, NULL, NULL, NULL, nonce) == 1
                and EVP_EncryptUpdate(self.enc, NULL, &outl, aad, <int>naad) == 1
                and (n == 0 or EVP_EncryptUpdate(self.enc, ct, &outl, pt, <int>n) == 1)
                and EVP_EncryptFinal_ex(self.enc, ct + n, &outl) == 1
                and EVP_CIPHER_CTX_ctrl(self.enc, EVP_CTRL_AEAD_GET_TAG, TAG_SIZE, tag) == 1)

    cdef bint open_raw(self, const uint8_t *nonce, const uint8_t *aad, Py_ssize_t naad,
                       const uint8_t *ct, uint8_t *pt, Py_ssize_t n,
                       const uint8_t *tag) noexcept nogil:
        cdef int outl
        return (EVP_DecryptInit_ex(self.dec, NULL, NULL, NULL, nonce) == 1
                and EVP_DecryptUpdate(self.dec, NULL, &outl, aad, <int>naad) == 1
                and (n == 0 or EVP_DecryptUpdate(self.dec, pt, &outl, ct, <int>n) == 1)
                and EVP_CIPHER_CTX_ctrl(self.dec, EVP_CTRL_AEAD_SET_TAG, TAG_SIZE,
                                        <void *>tag) == 1
                and EVP_DecryptFinal_ex(self.dec, pt + n, &outl) == 1)

    def seal(self, const uint8_t[::1] nonce not None, const uint8_t[::1] aad not None,
             const uint8_t[::1] plaintext=None) -> bytes:
        """Ciphertext followed by the 16-byte tag."""
        cdef Py_ssize_t n = 0 if plaintext is None else plaintext.shape[0]
        cdef bytearray out = bytearray(n + TAG_SIZE)
        cdef uint8_t *o = out
        cdef uint8_t z = 0
        if nonce.shape[0] != 12:
            raise ValueError("a nonce is 12 bytes")
        if not self.seal_raw(&nonce[0], &aad[0] if aad.shape[0] else &z, aad.shape[0],
                             &plaintext[0] if n else &z, o, n, o + n):
            raise ValueError("seal failed")
        return bytes(out)

    def open(self, const uint8_t[::1] nonce not None, const uint8_t[::1] aad not None,
             const uint8_t[::1] sealed not None):
        """The plaintext, or None if the tag does not verify."""
        cdef Py_ssize_t n = sealed.shape[0] - TAG_SIZE
        cdef bytearray out
        cdef uint8_t *o
        cdef uint8_t z = 0
        if nonce.shape[0] != 12:
            raise ValueError("a nonce is 12 bytes")
        if n < 0:
            return None
        out = bytearray(n + 1)
        o = out
        if not self.open_raw(&nonce[0], &aad[0] if aad.shape[0] else &z, aad.shape[0],
                             &sealed[0] if n else &z, o, n, &sealed[n]):
            return None
        return bytes(out[:n])


def mac_speed(str kind, Py_ssize_t n, Py_ssize_t count):
    """Seconds to authenticate `count` messages of n bytes with `kind` (the `bench mac` rows
    that run in C): hmac-sha256 (OpenSSL), chacha20-poly1305 (tag only), chacha20-poly1305-enc
    (encrypt the body too)."""
    import time
    cdef bytearray buf = bytearray(b"\x07" * n + bytes(n + 64))
    cdef uint8_t *m = buf
    cdef uint8_t key[32]
    cdef uint8_t nonce[12]
    cdef uint8_t tag[64]
    cdef unsigned int tl
    cdef Py_ssize_t i
    cdef int which = {"hmac-sha256": 0, "chacha20-poly1305": 1, "chacha20-poly1305-enc": 2}[kind]
    cdef Aead a
    for i in range(32):
        key[i] = i
    for i in range(12):
        nonce[i] = 0
    a = Aead(bytes(key[:32]))
    t = time.perf_counter()
    with nogil:
        for i in range(count):
            memcpy(nonce + 4, &i, sizeof(i) if sizeof(i) <= 8 else 8)
            if which == 0:
                HMAC(EVP_sha256(), key, 32, m, n, tag, &tl)
            elif which == 1:
                a.seal_raw(nonce, m, n, m, m + n, 0, tag)
            else:
                a.seal_raw(nonce, m, 67, m + 67, m + n, n - 67, tag)
    return time.perf_counter() - t


cdef bint _frame_rows(Aead aead, const uint8_t *model, Py_ssize_t mbytes, uint8_t *rows,
                      Py_ssize_t stride, Py_ssize_t *lengths, const uint8_t *prefix,
                      Py_ssize_t plen, int msg_type, int flags, uint32_t fleet, uint16_t sender,
                      uint16_t receiver, uint16_t block, uint32_t session, uint32_t round,
                      Py_ssize_t first_chunk, Py_ssize_t count, uint32_t n_chunks,
                      Py_ssize_t chunk_bytes, uint64_t seq0, uint16_t weight, int dtype,
                      uint8_t *scratch) noexcept nogil:
    """Frame and seal chunks first_chunk .. first_chunk + count - 1 into rows (see frame_batch);
    False if OpenSSL failed to seal one."""
    cdef bint encrypt = flags & FLAG_ENCRYPTED, ok = True
    cdef Py_ssize_t k, off, n
    cdef const uint8_t *src
    cdef uint8_t nonce[12]
    cdef uint8_t *row
    cdef uint8_t *h
    for k in range(count):
        off = (first_chunk + k) * chunk_bytes
        n = chunk_bytes if off + chunk_bytes <= mbytes else mbytes - off
        src = model + off
        if dtype != DTYPE_F32:  # encode, then frame the encoded bytes as the payload
            _encode_chunk(dtype, <const float*>src, scratch, n // 4)
            src = scratch
            n = _encoded_len(dtype, n // 4)
        row = rows + k * stride
        memcpy(row, prefix, plen)
        h = row + plen
        h[0] = VERSION
        h[1] = msg_type
        h[2] = dtype
        h[3] = flags
        _put32(h + 4, fleet)
        _put16(h + 8, sender)
        _put16(h + 10, receiver)
        _put16(h + 12, block)
        _put16(h + 14, weight)
        _put32(h + 16, session)
        _put32(h + 20, round)
        _put32(h + 24, <uint32_t>(first_chunk + k))
        _put32(h + 28, n_chunks)
        _put32(h + 32, <uint32_t>off)
        _put32(h + 36, <uint32_t>n)
        _put64(h + 40, seq0 + k)
        _nonce(h, nonce)
        lengths[k] = plen + HEADER_SIZE + n + TAG_SIZE
        if encrypt:
            ok &= aead.seal_raw(nonce, row, plen + HEADER_SIZE, src, h + HEADER_SIZE,
                                n, h + HEADER_SIZE + n)
        else:
            memcpy(h + HEADER_SIZE, src, n)
            ok &= aead.seal_raw(nonce, row, plen + HEADER_SIZE + n, NULL, h + HEADER_SIZE + n,
                                0, h + HEADER_SIZE + n)
    return ok


cdef int _check_framing(const uint8_t[::1] model, uint8_t[:, ::1] rows,
                        Py_ssize_t[::1] lengths, const uint8_t[::1] prefix,
                        Py_ssize_t first_chunk, Py_ssize_t stop_chunk, uint32_t n_chunks,
                        Py_ssize_t chunk_bytes, Py_ssize_t count, int dtype) except -1:
    cdef Py_ssize_t widest = _encoded_len(dtype, chunk_bytes // 4), mbytes = model.shape[0]
    if dtype < CODEC_F32 or dtype > CODEC_I8:
        raise ValueError("unknown payload dtype")
    if lengths.shape[0] < count or rows.shape[0] < count:
        raise ValueError("lengths shorter than the batch")
    if first_chunk < 0 or stop_chunk > n_chunks or chunk_bytes <= 0 or chunk_bytes % 4:
        raise ValueError("chunk range outside the model")
    if widest > MAX_PAYLOAD or rows.shape[1] < prefix.shape[0] + HEADER_SIZE + widest + TAG_SIZE:
        raise ValueError("rows too narrow for a datagram")
    if <Py_ssize_t>(n_chunks - 1) * chunk_bytes >= mbytes or <Py_ssize_t>n_chunks * chunk_bytes < mbytes:
        raise ValueError("n_chunks does not match the model size")
    return 0


def frame_batch(Aead aead not None, const uint8_t[::1] model not None,
                uint8_t[:, ::1] rows not None, Py_ssize_t[::1] lengths not None,
                const uint8_t[::1] prefix not None,
                int msg_type, int flags, uint32_t fleet, uint16_t sender, uint16_t receiver,
                uint16_t block, uint32_t session, uint32_t round,
                Py_ssize_t first_chunk, Py_ssize_t stop_chunk, uint32_t n_chunks,
                Py_ssize_t chunk_bytes, uint64_t seq0, uint16_t weight=0, int dtype=DTYPE_F32):
    """Frame chunks first_chunk.. of model (the flat vector's bytes) into rows, as many as fit
    in rows and below stop_chunk; row k gets sequence number seq0 + k and is sealed with `aead`
    (the link's key): the whole row is associated data, or with FLAG_ENCRYPTED in flags the
    payload is encrypted; every row carries the push-sum `weight` (the link's running sum, in
    counts). chunk_bytes is a chunk's size in the float32 model; with `dtype` another payload
    encoding (payload.py), each chunk is encoded on the way. Returns how many."""
    cdef Py_ssize_t count = min(stop_chunk - first_chunk, rows.shape[0])
    cdef bytearray scratch_obj = bytearray(_encoded_len(dtype, chunk_bytes // 4) + 4)
    cdef uint8_t *scratch = scratch_obj
    cdef bint ok
    if count <= 0:
        return 0
    _check_framing(model, rows, lengths, prefix, first_chunk, stop_chunk, n_chunks, chunk_bytes,
                   count, dtype)
    with nogil:
        ok = _frame_rows(aead, &model[0], model.shape[0], &rows[0, 0], rows.shape[1],
                         &lengths[0], &prefix[0], prefix.shape[0], msg_type, flags, fleet,
                         sender, receiver, block, session, round, first_chunk, count, n_chunks,
                         chunk_bytes, seq0, weight, dtype, scratch)
    if not ok:
        raise ValueError("OpenSSL failed to seal a datagram")
    return count


def send_paced(Aead aead not None, const uint8_t[::1] model not None,
               uint8_t[:, ::1] rows not None, Py_ssize_t[::1] lengths not None,
               const uint8_t[::1] prefix not None,
               int msg_type, int flags, uint32_t fleet, uint16_t sender, uint16_t receiver,
               uint16_t block, uint32_t session, uint32_t round,
               Py_ssize_t first_chunk, Py_ssize_t stop_chunk, uint32_t n_chunks,
               Py_ssize_t chunk_bytes, uint64_t seq0, uint16_t weight, int dtype,
               int fd, const unsigned char[::1] ip4 not None, int port, bint gso,
               Py_ssize_t batch, double rate, double burst_s, double next_at,
               const uint8_t[::1] stop=None, Py_ssize_t overhead=0):
    """Frame chunks first_chunk .. stop_chunk - 1 as frame_batch() does, `batch` rows at a time,
    and send each batch to ip4:port (_sendrows.pxi) once a token bucket of `rate` bytes a second
    allows it (rate 0: unpaced), booking each datagram as its length plus `overhead` (the
    frame's headers: transport/pacing.py's WIRE_OVERHEAD). The bucket is that module's Pacer:
    `next_at` (its CLOCK_MONOTONIC reading, time.perf_counter's clock) is when the bytes booked
    so far have left, never more than burst_s in the past. A whole round is one release of the GIL, not two
    or three a batch. A kernel that refuses UDP GSO (EINVAL, EIO) gets the rest without it.
    stop[0] set (by another thread: the transport closing its socket) ends it before the next
    batch, as if the round had been sent.
    Returns (datagrams sent, their bytes, next_at, errno or 0, gso, rows framed): a row framed
    and not sent has used its sequence number all the same (a nonce is never used twice)."""
    cdef Py_ssize_t count = stop_chunk - first_chunk, done = 0, k, sent = 0, total = 0
    cdef Py_ssize_t framed = 0
    cdef bytearray scratch_obj = bytearray(_encoded_len(dtype, chunk_bytes // 4) + 4)
    cdef uint8_t *scratch = scratch_obj
    cdef sockaddr_in addr
    cdef int err = 0
    cdef bint ok = True
    cdef volatile const uint8_t *halt = &stop[0] if stop is not None and stop.shape[0] else NULL
    if batch < 1:
        batch = 1
    if batch > rows.shape[0]:
        batch = rows.shape[0]
    if batch > MAX_BATCH:
        batch = MAX_BATCH
    if count <= 0:
        return 0, 0, next_at, 0, gso, 0
    _check_framing(model, rows, lengths, prefix, first_chunk, stop_chunk, n_chunks, chunk_bytes,
                   batch, dtype)
    _address(ip4, port, &addr)
    with nogil:
        while done < count:
            if halt != NULL and halt[0]:
                break
            k = min(batch, count - done)
            ok = _frame_rows(aead, &model[0], model.shape[0], &rows[0, 0], rows.shape[1],
                             &lengths[0], &prefix[0], prefix.shape[0], msg_type, flags, fleet,
                             sender, receiver, block, session, round, first_chunk + done, k,
                             n_chunks, chunk_bytes, seq0 + done, weight, dtype, scratch)
            if not ok:
                break
            framed = done + k
            err = _send_batch_paced(fd, &rows[0, 0], rows.shape[1], &lengths[0], k, &addr,
                                    &gso, overhead, rate, burst_s, &next_at, &sent, &total)
            done += sent
            if err:
                break
    if not ok:
        raise ValueError("OpenSSL failed to seal a datagram")
    return done, total, next_at, err, gso, framed


cdef inline bint _in_block(Py_ssize_t c, Py_ssize_t block, Py_ssize_t blocks,
                           Py_ssize_t n_chunks) noexcept nogil:
    """Chunk c is in block `block` of `blocks`: ChunkPlan.block_chunks' contiguous cut."""
    cdef Py_ssize_t q = n_chunks // blocks, r = n_chunks % blocks
    cdef Py_ssize_t start = block * q + (block if block < r else r)
    return start <= c < start + q + (1 if block < r else 0)


cdef inline Py_ssize_t _steady(const uint8_t *d, Py_ssize_t n, const uint8_t *prefix,
                               Py_ssize_t plen, uint32_t fleet, int me, int sender, int msg_type,
                               int flags, uint32_t session, uint32_t round, int64_t highest,
                               int64_t limit, int blocks, Py_ssize_t n_chunks,
                               Py_ssize_t chunk_bytes, Py_ssize_t mbytes,
                               Py_ssize_t max_body, int dtype) noexcept nogil:
    """Payload length if the datagram d (n bytes, framed) passes every check but the tag and
    finiteness for this slot, its sequence number in (highest, limit], else -1."""
    cdef const uint8_t *h = d + plen
    cdef Py_ssize_t length, c, off
    cdef uint64_t seq
    n -= plen
    if n < HEADER_SIZE + TAG_SIZE or n > max_body or memcmp(d, prefix, plen) != 0:
        return -1
    length = _le32(h + 36)
    if (h[0] != VERSION or h[1] != msg_type or h[2] != dtype
            or (h[3] & FLAG_ENCRYPTED) != flags
            or HEADER_SIZE + length + TAG_SIZE != n or _le32(h + 4) != fleet
            or _le16(h + 8) != sender or _le16(h + 10) != me
            or _le32(h + 16) != session or _le32(h + 20) != round
            or (blocks and _le16(h + 12) >= blocks)):
        return -1
    seq = _le64(h + 40)
    if seq > <uint64_t>0x7fffffffffffffff or <int64_t>seq <= highest or <int64_t>seq > limit:
        return -1
    c = _le32(h + 24)
    off = _le32(h + 32)
    if (_le32(h + 28) != n_chunks or c >= n_chunks or off != c * chunk_bytes
            or length != _encoded_len(dtype, (chunk_bytes if off + chunk_bytes <= mbytes
                                              else mbytes - off) // 4)
            or (blocks and not _in_block(c, _le16(h + 12), blocks, n_chunks))):
        return -1
    return length



cdef inline bint _from(const uint8_t *d, Py_ssize_t n, const uint8_t *prefix, Py_ssize_t plen,
                       int sender) noexcept nogil:
    """Whether row d (n bytes) is framed and its unauthenticated header names `sender`: a row
    run() must take in order, or stop at."""
    return (n >= plen + HEADER_SIZE + TAG_SIZE and memcmp(d, prefix, plen) == 0
            and _le16(d + plen + 8) == sender)


cdef class Run:
    """Files one sender's rows of a receive batch into one receive slot. Built once per receive
    batch array (rows, lengths, the group prefix and the `taken` flags are the transport's,
    reused for every batch), pointed at a slot with target(), then run() per sender and batch:
    typed views are acquired here once, not per call, which at small batches would cost more
    than the datagrams."""
    cdef const uint8_t[:, ::1] rows
    cdef const Py_ssize_t[::1] lengths
    cdef const uint8_t[::1] prefix
    cdef uint8_t[::1] taken
    cdef uint8_t[::1] buf
    cdef uint8_t[::1] mask
    cdef int64_t[::1] seqv
    cdef uint8_t[::1] scratch
    cdef float[::1] decoded
    cdef Py_ssize_t chunk_bytes, max_body, model_bytes, n_chunks
    cdef int dtype
    cdef readonly object seqs
    cdef readonly int64_t fresh, nbytes
    cdef readonly object rows_obj, taken_obj

    def __init__(self, rows not None, lengths not None, prefix not None, taken not None,
                 Py_ssize_t chunk_bytes, Py_ssize_t max_body, seqs not None,
                 int dtype, Py_ssize_t model_bytes, Py_ssize_t n_chunks):
        self.rows = rows
        self.rows_obj = rows
        self.lengths = lengths
        self.prefix = prefix
        self.taken = taken
        self.taken_obj = taken
        self.seqs = seqs
        self.seqv = seqs
        if self.prefix.shape[0] == 0 or max_body + self.prefix.shape[0] > self.rows.shape[1]:
            raise ValueError("rows too narrow for the largest datagram")
        if (self.lengths.shape[0] < self.rows.shape[0] or self.seqv.shape[0] < self.rows.shape[0]
                or self.taken.shape[0] < self.rows.shape[0]):
            raise ValueError("lengths, taken or seqs shorter than the batch")
        if not 0 < chunk_bytes <= 4 * MAX_PAYLOAD or chunk_bytes % 4:
            raise ValueError("chunk_bytes out of range")
        if dtype < CODEC_F32 or dtype > CODEC_I8:
            raise ValueError("unknown payload dtype")
        if model_bytes <= 0 or n_chunks != (model_bytes + chunk_bytes - 1) // chunk_bytes:
            raise ValueError("model_bytes and n_chunks do not fit chunk_bytes")
        self.model_bytes = model_bytes  # every slot's buffer is the whole model
        self.n_chunks = n_chunks
        self.chunk_bytes = chunk_bytes  # a chunk's size in the float32 model
        self.max_body = max_body
        self.dtype = dtype
        self.scratch = bytearray(chunk_bytes)  # decrypted payload, copied in once it verified
        # a compressed payload decoded, copied in once it is finite
        self.decoded = np.zeros(chunk_bytes // 4 if dtype != DTYPE_F32 else 1, np.float32)

    def target(self, uint8_t[::1] buf not None, uint8_t[::1] mask not None):
        """Point run() at a slot: the model-sized byte buffer and its chunk mask."""
        if buf.shape[0] != self.model_bytes or mask.shape[0] != self.n_chunks:
            raise ValueError("the buffer or its mask is not the model's size")
        self.buf = buf
        self.mask = mask

    def peek(self, Py_ssize_t i):
        """(sender, msg_type, flags, session, round) from the unauthenticated header of row i,
        or None if it is too short to hold one; only used to choose what run() should try."""
        cdef Py_ssize_t plen = self.prefix.shape[0]
        cdef const uint8_t *h
        if not 0 <= i < self.rows.shape[0] or self.lengths[i] < plen + HEADER_SIZE + TAG_SIZE:
            return None
        h = &self.rows[i, plen]
        return _le16(h + 8), h[1], h[3], _le32(h + 16), _le32(h + 20)

    def run(self, Aead aead not None, Py_ssize_t start, Py_ssize_t stop, uint32_t fleet, int me,
            int sender, int msg_type, bint encrypted, uint32_t session, uint32_t round,
            int64_t highest, int64_t limit, int blocks=0, bint discard=False):
        """Accept `sender`'s rows among start .. stop - 1, in order, while each one is,
        unchanged, a datagram the Python inbox would accept into the target slot of (sender,
        msg_type, session, round): group, size, version, type, dtype, encryption flag, fleet,
        receiver and tag (under `aead`, the link's key) valid, sequence above `highest`, rising
        and at most `limit`, chunk geometry exact (and the block id below `blocks`, when not 0),
        payload finite (decoded, for a compressed dtype). Each accepted payload is copied
        (decrypted, decoded) into the slot, its mask byte and its row's `taken` flag set. Rows
        already taken, and rows whose header names another sender, are passed over: a link's
        order is its own, and paced senders' bursts interleave in a batch, so one call takes a
        sender's whole share of it. Stops at the first row of `sender` it would not accept,
        touching nothing for it. Returns how many were accepted; their sequence numbers are
        seqs[:k]; fresh counts chunks new to the mask, nbytes the payload bytes. With `discard`
        the same rows are taken, and nothing is copied or marked: the round has no buffer, and
        the caller drops them as its inbox would, once they are known to be authentic and
        finite."""
        cdef Py_ssize_t plen = self.prefix.shape[0], i, c, off, length
        cdef Py_ssize_t mbytes, n_chunks, accepted = 0
        cdef Py_ssize_t chunk_bytes = self.chunk_bytes, max_body = self.max_body
        cdef int flags = FLAG_ENCRYPTED if encrypted else 0
        cdef int64_t fresh = 0, nbytes = 0
        cdef const uint8_t *row
        cdef const uint8_t *h
        cdef const uint8_t *payload
        cdef uint8_t *scratch = &self.scratch[0]
        cdef float *decoded = &self.decoded[0]
        cdef int dtype = self.dtype
        cdef Py_ssize_t elems
        cdef uint8_t nonce[12]
        cdef bint ok
        if self.buf is None and not discard:
            raise ValueError("target() first")
        mbytes = self.model_bytes
        n_chunks = self.n_chunks
        if start < 0 or stop > self.rows.shape[0]:
            raise ValueError("rows outside the batch")
        with nogil:
            for i in range(start, stop):
                row = &self.rows[i, 0]
                if self.taken[i] or not _from(row, self.lengths[i], &self.prefix[0], plen,
                                              sender):
                    continue
                length = _steady(row, self.lengths[i], &self.prefix[0], plen, fleet, me, sender,
                                 msg_type, flags, session, round, highest, limit, blocks,
                                 n_chunks, chunk_bytes, mbytes, max_body, dtype)
                if length < 0:
                    break
                h = row + plen
                _nonce(h, nonce)
                if encrypted:
                    ok = aead.open_raw(nonce, row, plen + HEADER_SIZE, h + HEADER_SIZE, scratch,
                                       length, h + HEADER_SIZE + length)
                    payload = scratch
                else:
                    ok = aead.open_raw(nonce, row, plen + HEADER_SIZE + length, NULL, scratch, 0,
                                       h + HEADER_SIZE + length)
                    payload = h + HEADER_SIZE
                if not ok:
                    break
                c = _le32(h + 24)
                off = _le32(h + 32)
                if discard:
                    if dtype == CODEC_I8 and _i8_products_finite(payload):
                        pass  # every q * scale is finite: nothing to decode to know it
                    elif dtype != DTYPE_F32:
                        elems = (chunk_bytes if off + chunk_bytes <= mbytes else mbytes - off) // 4
                        _decode_chunk(dtype, payload, decoded, elems)
                        if not _finite(<const uint8_t*>decoded, 4 * elems):
                            break
                    elif not _finite(payload, length):
                        break
                elif dtype == CODEC_I8 and _i8_products_finite(payload):
                    # every element is q * scale with |q| <= 128: finite, so decoded in place
                    elems = (chunk_bytes if off + chunk_bytes <= mbytes else mbytes - off) // 4
                    _decode_chunk(dtype, payload, <float*>&self.buf[off], elems)
                elif dtype != DTYPE_F32:
                    elems = (chunk_bytes if off + chunk_bytes <= mbytes else mbytes - off) // 4
                    _decode_chunk(dtype, payload, decoded, elems)
                    if not _finite(<const uint8_t*>decoded, 4 * elems):
                        break
                    memcpy(&self.buf[off], decoded, 4 * elems)
                elif not _finite(payload, length):
                    break
                else:
                    memcpy(&self.buf[off], payload, length)
                if not discard:
                    fresh += self.mask[c] == 0
                    self.mask[c] = 1
                highest = <int64_t>_le64(h + 40)
                self.seqv[accepted] = highest
                self.taken[i] = 1
                accepted += 1
                nbytes += length
        self.fresh = fresh
        self.nbytes = nbytes
        return accepted
