"""Send side: cut a flat float32 vector into sealed datagrams, one reused buffer.

Each chunk is encoded as the codec says (payload.py): float32 as it is, or compressed.
The Encoder frames each chunk as ``[len][group][header][payload][tag]`` (see wire.py) in a
preallocated buffer and yields a view of it; the caller sends the view before asking for the next.
batches() frames many chunks at once into preallocated rows for Transport.send_batch(), in C
(edgegossip._wire_c) when it is built, encoding included, with the same bytes as the
one-at-a-time path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from edgegossip import extensions
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.congestion.signal import Report
from edgegossip.dataplane.keys import LinkKeys
from edgegossip.dataplane.payload import CODECS, Codec
from edgegossip.transport.base import PacedLink
from edgegossip.transport.pacing import WIRE_OVERHEAD

_wire_c = extensions.load("_wire_c")  # built without OpenSSL headers: frame in Python

BATCH = 32  # datagrams framed per batch, sent with one syscall; 32 rows of 8 KB stay in L2


class Framing(NamedTuple):
    """What a message carries beyond its type and round: the chunks (None: all), the RPS
    block, the flags and the push-sum running sum (wire.py)."""

    chunks: range | None = None
    block: int = 0
    flags: int = 0
    weight: int = 0


WHOLE = Framing()  # every chunk, no block, flags or weight


class Encoder:
    """Frames this device's datagrams. `keys` is a LinkKeys, or a fleet root key (bytes) to
    derive them from; with `encrypt` the payloads are encrypted, not only authenticated."""

    def __init__(
        self,
        plan: ChunkPlan,
        keys: LinkKeys | bytes,
        fleet: int,
        sender: int,
        group: bytes = wire.DEFAULT_GROUP,
        session: int = 1,
        encrypt: bool = False,
        codec: Codec = CODECS["float32"],
    ):
        """plan: chunks as codec.plan() cut them, so an encoded chunk fills one datagram."""
        encoded = codec.encoded_len(plan.chunk_elems)
        wire.check_chunk_bytes(-(-encoded // 4) * 4, group)
        self.plan = plan
        self.codec = codec
        self._encoded = np.zeros(encoded, np.uint8)
        self._step = np.zeros(1, np.uint16)  # a relative codec's chunk step (payload.py)
        self.keys = LinkKeys.of(keys)
        self.encrypt = encrypt
        self.fleet = fleet
        self.sender = sender
        if not 0 < session < 2**32:
            raise ValueError(f"session {session} outside 1 .. 2**32 - 1")
        self.session = session  # this process's incarnation (checkpoint.next_session)
        self.prefix = wire.frame_prefix(group)
        self._buf = bytearray(len(self.prefix) + wire.HEADER_SIZE + max(encoded, 4) + wire.TAG_SIZE)
        self._buf[: len(self.prefix)] = self.prefix
        self._view = memoryview(self._buf)
        # one sequence per receiver, so it can count the gaps in what it was sent; each starts
        # at 1 in every session, and the session grows across restarts
        self._seq: dict[int, int] = {}
        self.datagrams = 0
        self.bytes = 0
        self.rows = np.zeros((BATCH, len(self._buf)), np.uint8)
        self.lengths = np.zeros(BATCH, np.intp)
        self._prefix = np.frombuffer(self.prefix, np.uint8)

    def _aead(self, receiver: int):
        a = self.keys.aead(self.sender, receiver)
        if a is None:
            raise ValueError(f"no key for the link {self.sender} -> {receiver}")
        return a

    def _next_seq(self, receiver: int) -> int:
        seq = self._seq.get(receiver, 0) + 1
        self._seq[receiver] = seq
        return seq

    def _frame(
        self,
        msg_type: int,
        round: int,
        block: int,
        flags: int,
        chunk: int,
        payload: memoryview,
        receiver: int = 0,
        weight: int = 0,
    ) -> memoryview:
        p = len(self.prefix)
        n = len(payload)
        seq = self._next_seq(receiver)
        if self.encrypt:
            flags |= wire.FLAG_ENCRYPTED
        h = wire.Header(
            wire.VERSION,
            msg_type,
            self.codec.dtype,
            flags,
            self.fleet,
            self.sender,
            receiver,
            block,
            weight,
            self.session,
            round,
            chunk,
            self.plan.n_chunks,
            chunk * self.plan.chunk_bytes,
            n,
            seq,
        )
        wire.pack_into(self._buf, p, h)
        body = p + wire.HEADER_SIZE
        end = body + n
        aead = self._aead(receiver)
        if self.encrypt:
            sealed = aead.seal(wire.nonce(h), self._view[:body], payload)
        else:
            self._view[body:end] = payload
            sealed = aead.seal(wire.nonce(h), self._view[:end])
        start = body if self.encrypt else end  # ciphertext and tag, or the tag alone
        self._view[start : end + wire.TAG_SIZE] = sealed
        self.datagrams += 1
        self.bytes += end + wire.TAG_SIZE
        return self._view[: end + wire.TAG_SIZE]

    def chunks(
        self,
        vec: np.ndarray,
        msg_type: int,
        round: int,
        chunks: Iterable[int] | None = None,
        block: int = 0,
        flags: int = 0,
        receiver: int = 0,
        weight: int = 0,
    ) -> Iterator[memoryview]:
        """Framed datagrams of `vec` (the whole model, or the given chunk indices) for
        `receiver`, numbered in the sequence of that link."""
        raw = memoryview(vec.view(np.uint8))
        plan, codec = self.plan, self.codec
        enc = memoryview(self._encoded)
        for c in range(plan.n_chunks) if chunks is None else chunks:
            start, stop = plan.chunk_range(c)
            if codec.dtype == wire.DTYPE_F32:
                payload = raw[start:stop]
            else:
                x = vec[start // 4 : stop // 4]
                n = codec.encode(x, self._encoded, plan.chunk_elems, start // 4, self._step)
                payload = enc[:n]
                if codec.relative:  # its step rides in the weight field (payload.py)
                    weight = int(self._step[0])
            yield self._frame(msg_type, round, block, flags, c, payload, receiver, weight)

    def _compiled(self, vec: np.ndarray, span) -> bool:
        """The compiled framer takes this vector and chunk span (a contiguous run)."""
        return (
            _wire_c is not None
            and not self.codec.relative  # its reference is in Python (payload.py)
            and isinstance(span, range)
            and span.step == 1
            and vec.dtype == np.float32
            and vec.flags.c_contiguous
            and vec.size == self.plan.n_params
        )

    def _framing(self, vec, msg_type, round, first, stop, block, flags, receiver) -> tuple:
        """The leading arguments of the compiled framers for chunks first .. stop - 1 of vec."""
        if self.encrypt:
            flags |= wire.FLAG_ENCRYPTED
        return (
            self._aead(receiver),
            vec.view(np.uint8),
            self.rows,
            self.lengths,
            self._prefix,
            msg_type,
            flags,
            self.fleet,
            self.sender,
            receiver,
            block,
            self.session,
            round,
            first,
            stop,
            self.plan.n_chunks,
            self.plan.chunk_bytes,
        )

    def send_paced(
        self,
        link: PacedLink,
        vec: np.ndarray,
        msg_type: int,
        round: int,
        framing: Framing = WHOLE,
        receiver: int = 0,
        batch: int = BATCH,
    ) -> bool:
        """Frame the datagrams batches() would and send them through link, paced, `batch` at a
        time, in one compiled call (edgegossip._wire_c.send_paced). False, with nothing sent,
        where that call does not apply (then frame with batches()). Raises OSError as a failed
        send does, after counting what left."""
        chunks, block, flags, weight = framing
        plan = self.plan
        span = range(plan.n_chunks) if chunks is None else chunks
        if not self._compiled(vec, span):
            return False
        assert isinstance(span, range) and _wire_c is not None
        seq0 = self._seq.get(receiver, 0) + 1
        sent, nbytes, link.next_at, err, link.gso, framed = _wire_c.send_paced(
            *self._framing(vec, msg_type, round, span.start, span.stop, block, flags, receiver),
            seq0,
            weight,
            self.codec.dtype,
            link.fd,
            link.ip4,
            link.port,
            link.gso,
            max(1, min(batch, BATCH)),
            link.rate,
            link.burst_s,
            link.next_at,
            link.stop,
            WIRE_OVERHEAD,
        )
        self._seq[receiver] = seq0 + framed - 1  # framed and unsent rows used theirs too
        self.datagrams += sent
        self.bytes += nbytes
        if err:
            raise OSError(err, f"sendmmsg failed after {sent} of {len(span)} datagrams")
        return True

    def batches(
        self,
        vec: np.ndarray,
        msg_type: int,
        round: int,
        chunks: Iterable[int] | None = None,
        block: int = 0,
        flags: int = 0,
        receiver: int = 0,
        batch: int = BATCH,
        weight: int = 0,
    ) -> Iterator[int]:
        """Frame the same datagrams as chunks(), up to `batch` at a time, into self.rows (row i
        is self.lengths[i] bytes); yields how many rows hold the current batch. The caller sends
        them before asking for the next."""
        batch = max(1, min(batch, BATCH))
        plan = self.plan
        span = range(plan.n_chunks) if chunks is None else chunks
        if self._compiled(vec, span):
            assert isinstance(span, range) and _wire_c is not None
            for first in range(span.start, span.stop, batch):
                stop = min(first + batch, span.stop)
                seq0 = self._next_seq(receiver)
                n = _wire_c.frame_batch(
                    *self._framing(vec, msg_type, round, first, stop, block, flags, receiver),
                    seq0,
                    weight,
                    self.codec.dtype,
                )
                self._seq[receiver] = seq0 + n - 1
                self.datagrams += n
                self.bytes += int(self.lengths[:n].sum())
                yield n
            return
        k = 0
        for d in self.chunks(vec, msg_type, round, span, block, flags, receiver, weight):
            self.rows[k, : len(d)] = d
            self.lengths[k] = len(d)
            k += 1
            if k == batch:
                yield k
                k = 0
        if k:
            yield k

    @property
    def datagram_bytes(self) -> int:
        """A whole chunk's datagram, framing included."""
        return len(self._buf)

    def seq(self, receiver: int) -> int:
        """The last sequence number used on the link to receiver (0: none yet)."""
        return self._seq.get(receiver, 0)

    def feedback(self, report: Report, receiver: int) -> memoryview:
        """A FEEDBACK datagram: our report on the link from receiver (wire.FEEDBACK_BODY)."""
        body = wire.FEEDBACK_BODY.pack(
            report.session, report.highest, report.first, report.arrived, report.at
        )
        return self._frame(wire.MsgType.FEEDBACK, 0, 0, 0, 0, memoryview(body), receiver)

    def request(self, round: int, flags: int = 0, receiver: int = 0) -> memoryview:
        """A payload-less REQUEST datagram (Gossiping SGD pull)."""
        return self._frame(wire.MsgType.REQUEST, round, 0, flags, 0, memoryview(b""), receiver)
