"""Send side: cut a flat float32 vector into authenticated datagrams, one reused buffer.

The Encoder frames each chunk as ``[len][group][header][payload][tag]`` (see wire.py) in a
preallocated buffer and yields a view of it; the caller sends the view before asking for the next.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import numpy as np

from edgegossip import wire
from edgegossip.chunking import ChunkPlan


class Encoder:
    def __init__(self, plan: ChunkPlan, key: bytes, fleet: int, sender: int,
                 group: bytes = wire.DEFAULT_GROUP):
        wire.check_chunk_bytes(plan.chunk_bytes, group)
        self.plan = plan
        self.key = key
        self.fleet = fleet
        self.sender = sender
        self.prefix = wire.frame_prefix(group)
        self._buf = bytearray(len(self.prefix) + wire.HEADER_SIZE + plan.chunk_bytes
                              + wire.TAG_SIZE)
        self._buf[:len(self.prefix)] = self.prefix
        self._view = memoryview(self._buf)
        # one sequence per destination stream, so a receiver can count the gaps in what it was
        # sent; each starts at the microsecond clock so it keeps rising across restarts
        self._seq: dict[object, int] = {}
        self.datagrams = 0
        self.bytes = 0

    def _next_seq(self, stream: object) -> int:
        seq = self._seq.get(stream)
        seq = time.time_ns() // 1000 if seq is None else seq + 1
        self._seq[stream] = seq
        return seq

    def _frame(self, msg_type: int, round: int, block: int, flags: int, chunk: int,
               payload: memoryview, stream: object = None) -> memoryview:
        p = len(self.prefix)
        n = len(payload)
        seq = self._next_seq(stream)
        wire.pack_into(self._buf, p, wire.Header(
            wire.VERSION, msg_type, wire.DTYPE_F32, flags, self.fleet, self.sender, block, round,
            chunk, self.plan.n_chunks, chunk * self.plan.chunk_bytes, n, seq))
        end = p + wire.HEADER_SIZE + n
        self._view[p + wire.HEADER_SIZE:end] = payload
        self._view[end:end + wire.TAG_SIZE] = wire.make_tag(self.key, self._view[p:end])
        self.datagrams += 1
        self.bytes += end + wire.TAG_SIZE
        return self._view[:end + wire.TAG_SIZE]

    def chunks(self, vec: np.ndarray, msg_type: int, round: int, chunks: Iterable[int] | None = None,
               block: int = 0, flags: int = 0, stream: object = None) -> Iterator[memoryview]:
        """Framed datagrams of `vec` (the whole model, or the given chunk indices), numbered in
        the sequence of `stream` (one stream per destination)."""
        raw = memoryview(vec.view(np.uint8))
        plan = self.plan
        for c in (range(plan.n_chunks) if chunks is None else chunks):
            start, stop = plan.chunk_range(c)
            yield self._frame(msg_type, round, block, flags, c, raw[start:stop], stream)

    def request(self, round: int, flags: int = 0, stream: object = None) -> memoryview:
        """A payload-less REQUEST datagram (Gossiping SGD pull)."""
        return self._frame(wire.MsgType.REQUEST, round, 0, flags, 0, memoryview(b""), stream)
