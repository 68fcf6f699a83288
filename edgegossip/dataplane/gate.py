"""What a datagram must be to be let in, before anything of it is stored: framing and header
sane, meant for this fleet and this receiver, from a sender that holds this link's key, its tag
verified (and its payload decrypted), and, for a chunk, the chunk where the model has one, in
this receiver's encoding, all finite. Each check that fails names its drop reason
(edgegossip/dataplane/drops.py); the replay and round rules, which need what the receiver
remembers of each link, come after these (inbox.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.keys import LinkKeys
from edgegossip.dataplane.payload import CODECS, Codec


@dataclass
class Gate:
    plan: ChunkPlan
    keys: LinkKeys
    fleet: int  # the fleet id every datagram must carry
    me: int = 0  # datagrams naming another receiver are dropped
    peers: frozenset[int] | None = None  # None admits any sender id whose tag verifies
    require_encryption: bool = False
    codec: Codec = CODECS["float32"]  # payloads in another encoding are dropped as bad_dtype
    rps_blocks: int = 0  # RPS block ids must be below this
    slices: int = 1  # a PARAMS carries one of this many slices of the model (train.slices)
    messages: frozenset[int] | None = None  # the types the algorithm collects; None: any
    group: bytes = wire.DEFAULT_GROUP
    prefix: bytes = field(init=False)
    max_body: int = field(init=False)
    _decoded: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keys = LinkKeys.of(self.keys)
        if self.peers is not None:
            self.peers = frozenset(self.peers)
        if self.messages is not None:  # a report on our sending comes whatever the algorithm
            self.messages = frozenset(self.messages) | {wire.MsgType.FEEDBACK}
        self.prefix = wire.frame_prefix(self.group)
        elems = self.plan.chunk_elems
        self.max_body = wire.HEADER_SIZE + self.codec.encoded_len(elems) + wire.TAG_SIZE
        self._decoded = np.zeros(elems, np.float32)  # one chunk, decoded (receive thread only)

    def blocks(self, msg_type: int) -> int:
        """How many blocks a message of msg_type cuts the model into (wire.blocks_of)."""
        return wire.blocks_of(msg_type, self.rps_blocks, self.slices)

    def sender(self, sender: int, encrypted: bool):
        """(the link's AEAD, None) if a datagram from `sender`, so encrypted or not, may be let
        in; else (None, the drop reason)."""
        aead = self.keys.aead(sender, self.me)
        if aead is None or (self.peers is not None and sender not in self.peers):
            return None, "unknown_sender"
        if self.require_encryption and not encrypted:
            return None, "not_encrypted"
        return aead, None

    def open(self, body: memoryview) -> tuple[wire.Header, memoryview] | str:
        """(header, payload in the clear) of an authentic datagram, else the drop reason."""
        if len(body) > self.max_body:
            return "oversized"
        try:
            h = wire.unpack(body)
        except wire.WireError as e:
            return e.reason
        if h.fleet != self.fleet:
            return "wrong_fleet"
        if h.dtype != self.codec.dtype:
            return "bad_dtype"
        if h.receiver != self.me:
            return "wrong_receiver"
        if self.messages is not None and h.msg_type not in self.messages:
            return "unwanted_type"
        encrypted = bool(h.flags & wire.FLAG_ENCRYPTED)
        aead, why = self.sender(h.sender, encrypted)
        if why is not None:
            return why
        end = wire.HEADER_SIZE + h.length
        if encrypted:
            payload = aead.open(
                wire.nonce(h),
                self.prefix + bytes(body[: wire.HEADER_SIZE]),
                body[wire.HEADER_SIZE :],
            )
        else:
            payload = body[wire.HEADER_SIZE : end]
            if aead.open(wire.nonce(h), self.prefix + bytes(body[:end]), body[end:]) is None:
                payload = None
        if payload is None:
            return "bad_tag"
        return h, payload

    def chunk(self, h: wire.Header, payload: memoryview) -> memoryview | str:
        """The chunk's float32 bytes if it fits the model where it says it goes, else the drop
        reason. A decoded chunk lives in a buffer the next call overwrites."""
        plan = self.plan
        c = h.chunk_index
        elems = min(plan.chunk_bytes, plan.model_bytes - h.byte_offset) // 4
        blocks = self.blocks(h.msg_type)
        if (
            h.chunk_count != plan.n_chunks
            or c >= plan.n_chunks
            or h.byte_offset != c * plan.chunk_bytes
            or h.length != self.codec.encoded_len(elems)
            or (blocks and (h.block >= blocks or c not in plan.block_chunks(h.block, blocks)))
        ):
            return "out_of_bounds"
        if self.codec.dtype != wire.DTYPE_F32:
            out = self._decoded[:elems]
            self.codec.decode(payload, out, elems, h.byte_offset // 4, (h.weight,))
            payload = memoryview(out.view(np.uint8))
        if not kernels.all_finite(payload):
            return "non_finite"
        return payload
