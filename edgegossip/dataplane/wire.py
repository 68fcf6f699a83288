"""Datagram framing: bytes in, typed header out. No sockets here.

A datagram on the wire is ``[1 byte group length][group bytes][body]``, the framing libzmq's
RADIO/DISH use over udp://, so a plain UDP socket and a DISH read the same bytes. The body is:

    offset size  field
    0      1     version      protocol version, VERSION (4)
    1      1     msg_type     PARAMS, REQUEST, REDUCE, GATHER or FEEDBACK (MsgType)
    2      1     dtype        payload encoding (payload.py): DTYPE_F32 (1) little-endian float32,
                              DTYPE_F16 (2) float16, DTYPE_BF16 (3) bfloat16, DTYPE_I8 (4) a
                              float32 scale then int8 elements, DTYPE_D4 (5) 4-bit
                              distances from the initial model, the step in `weight`
    3      1     flags        FLAG_REPLY: the sender wants our parameters back (Elastic Gossip);
                              FLAG_ENCRYPTED: the payload is encrypted
    4      4     fleet        fleet id; datagrams of another fleet are dropped
    8      2     sender       worker id of the sender, 0 .. 65535
    10     2     receiver     worker id this datagram is for; any other receiver drops it
    12     2     block        block id: the RPS server block, or the slice of the model an Elastic
                              Gossip PARAMS carries (train.slices; 0 for whole-model messages)
    14     2     weight       push-sum running sum of the link (sender, receiver) within the
                              session, in counts modulo 2^16 whose unit the algorithm sets
                              (algorithms/gossip_push.py; gossip-push PARAMS); a delta4 chunk's
                              step, bfloat16 bits (payload.py); 0 in every other message
    16     4     session      the sender's incarnation, persisted and raised at every start
    20     4     round        the sender's model round (exchange number) within its session
    24     4     chunk_index  index of this chunk in the whole model, 0 .. chunk_count - 1
    28     4     chunk_count  chunks in the whole model at this chunk size
    32     4     byte_offset  where the payload goes in the flat parameter vector, in bytes
    36     4     length       payload length in bytes (multiple of 4)
    40     8     seq          sequence number on the link (sender, receiver) within the session
    48     len   payload      parameters, encoded as dtype says
    48+len 16    tag          ChaCha20-Poly1305 tag under the key of the link sender -> receiver,
                              nonce (session, seq), the rest of the datagram associated data

A FEEDBACK datagram's payload is a receiver's report on the link from the datagram's receiver
(FEEDBACK_BODY, dataplane/congestion/signal.py's Report): that sender's session (u32), the
highest sequence number that arrived, the first of the session, how many arrived from it (u64
each), and when the highest arrived on the reporter's monotonic clock (float64 seconds).

All integers are little-endian. The tag covers the group framing, header and payload (aead.py);
a receiver checks it before it trusts any field beyond the fleet, receiver and sender ids.
(session, seq) only grows on a link,
across restarts of either end: that, the receiver field and the tag are what make a captured
datagram useless anywhere but once, at the receiver it was meant for.

Versions differ on the wire and drop each other's datagrams as ``bad_version``: a fleet upgrades
all its devices together. Version 1 had a 40-byte header, an HMAC-SHA256 tag and no receiver or
session; version 2 had bytes 14-15 reserved (0), where version 3 carried the push-sum weight
a message gave (float16) and version 4 carries the link's running sum of them.
"""

from __future__ import annotations

import hashlib
import struct
from enum import IntEnum
from typing import NamedTuple

from edgegossip.errors import EdgegossipError
from edgegossip.transport.base import ZMQ_MAX_DATAGRAM

VERSION = 4
DTYPE_F32 = 1
DTYPE_F16 = 2
DTYPE_BF16 = 3
DTYPE_I8 = 4
DTYPE_D4 = 5
FLAG_REPLY = 0x01
FLAG_ENCRYPTED = 0x02

HEADER = struct.Struct("<BBBBIHHHHIIIIIIQ")
HEADER_SIZE = HEADER.size  # 48
FEEDBACK_BODY = struct.Struct("<IQQQd")  # session, highest, first, arrived, at: 36 bytes
TAG_SIZE = 16
MTU_UDP_PAYLOAD = 1472  # 1500-byte MTU minus IPv4 and UDP headers: no IP fragmentation
DEFAULT_GROUP = b"eg"


class MsgType(IntEnum):
    PARAMS = 1  # a (partial) model for a gossip exchange
    REQUEST = 2  # "send me your parameters" (Gossiping SGD pull); no payload
    REDUCE = 3  # RPS reduce-scatter: my copy of your block
    GATHER = 4  # RPS all-gather: the averaged block I serve
    FEEDBACK = 5  # a receiver's report on the link from us (congestion control); any algorithm


class Header(NamedTuple):
    version: int
    msg_type: int
    dtype: int
    flags: int
    fleet: int
    sender: int
    receiver: int
    block: int
    weight: int  # push-sum running sum, counts modulo 2^16 (gossip-push)
    session: int
    round: int
    chunk_index: int
    chunk_count: int
    byte_offset: int
    length: int
    seq: int


class WireError(EdgegossipError, ValueError):
    """A datagram that cannot be decoded; reason is a drop-counter key."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def framing_overhead(group: bytes = DEFAULT_GROUP) -> int:
    """Bytes of a datagram that are not payload."""
    return 1 + len(group) + HEADER_SIZE + TAG_SIZE


def default_chunk_bytes(group: bytes = DEFAULT_GROUP) -> int:
    """Largest payload (multiple of 4) whose datagram fits one 1500-byte-MTU packet."""
    return (MTU_UDP_PAYLOAD - framing_overhead(group)) // 4 * 4


def max_chunk_bytes(group: bytes = DEFAULT_GROUP) -> int:
    """Largest payload (multiple of 4) libzmq can carry: body <= 8192 - 1 - len(group)."""
    return (ZMQ_MAX_DATAGRAM - framing_overhead(group)) // 4 * 4


def check_chunk_bytes(chunk_bytes: int, group: bytes = DEFAULT_GROUP) -> int:
    if chunk_bytes <= 0 or chunk_bytes % 4:
        raise ValueError(f"chunk size {chunk_bytes} must be a positive multiple of 4 bytes")
    if chunk_bytes > max_chunk_bytes(group):
        raise ValueError(
            f"chunk size {chunk_bytes} exceeds the largest datagram libzmq carries "
            f"({max_chunk_bytes(group)} payload bytes)"
        )
    return chunk_bytes


def frame_prefix(group: bytes) -> bytes:
    if not 0 < len(group) <= 255:
        raise ValueError("group must be 1..255 bytes")
    return bytes([len(group)]) + group


def derive_key(secret: str | bytes) -> bytes:
    """Fleet root key from a passphrase or raw bytes (32 bytes; stretching is not needed for a
    key the operator generated, but a human passphrase gets a fixed-salt scrypt). Link keys are
    derived from it (keys.py)."""
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    return hashlib.scrypt(raw, salt=b"edgegossip-fleet-key-v1", n=2**14, r=8, p=1, dklen=32)


def pack_into(buf: bytearray | memoryview, offset: int, h: Header) -> None:
    HEADER.pack_into(buf, offset, *h)


def unpack(body: bytes | memoryview) -> Header:
    """Decode the header of a datagram body; checks only what needs no key."""
    n = len(body)
    if n < HEADER_SIZE + TAG_SIZE:
        raise WireError("truncated")
    h = _make_header(HEADER.unpack_from(body, 0))
    if h.version != VERSION:
        raise WireError("bad_version")
    if HEADER_SIZE + h.length + TAG_SIZE != n:
        raise WireError("truncated")
    if h.msg_type not in _MSG_TYPES:
        raise WireError("bad_type")
    if h.dtype not in _DTYPES or (h.dtype == DTYPE_F32 and h.length % 4):
        raise WireError("bad_dtype")
    return h


def blocks_of(msg_type: int, rps_blocks: int, slices: int) -> int:
    """How many blocks a message of msg_type cuts the model into, its block field naming one (0:
    it carries the whole model): RPS's REDUCE and GATHER one per server, Elastic Gossip's PARAMS
    one per slice (train.slices)."""
    if msg_type in (MsgType.REDUCE, MsgType.GATHER):
        return rps_blocks
    if msg_type == MsgType.PARAMS and slices > 1:
        return slices
    return 0


def nonce(h: Header) -> bytes:
    """The AEAD nonce of a datagram: (session, seq), unique under its link key."""
    return _NONCE.pack(h.session, h.seq)


_NONCE = struct.Struct("<IQ")
_MSG_TYPES = frozenset(int(t) for t in MsgType)
_DTYPES = frozenset((DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_I8, DTYPE_D4))
_make_header = Header._make
