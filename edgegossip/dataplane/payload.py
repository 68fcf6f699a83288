"""What a datagram's payload holds: a chunk of the parameters as float32 (as they are), float16,
bfloat16, or int8 with a float32 scale in front (max|x| / 127 of that chunk).

Each datagram is encoded on its own, from the parameters themselves, and decoded on its own.
The compressed-gossip literature (CHOCO-SGD, Koloskova et al. 2019) sends compressed
*differences* against an estimate of each peer's model that sender and receiver both keep.
That needs both copies of the estimate to stay equal, and on this network they do not: a lost
datagram updates the sender's copy and not the receiver's, with no retransmission to repair it.
The error then stays in the estimate and builds up, and nothing tells either side. An estimate
per peer would also cost one more model copy per peer, and a Pi Zero 2 W cannot afford that.
Quantising the parameters themselves, per datagram, keeps a lost datagram as harmless as
before (its chunk keeps the receiver's own values), at the price of rounding error in each
exchange: relative 2^-11 for float16, 2^-8 for bfloat16, and half a step of max|x|/127 per
chunk for int8 (rounded to nearest, not stochastically).

A chunk holds as many elements as fit the datagram, so float16 and bfloat16 send half the
datagrams of float32 and int8 about a quarter: the per-datagram framing shrinks with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan

NAMES = ("float32", "float16", "bfloat16", "int8")


@dataclass(frozen=True)
class Codec:
    name: str
    dtype: int  # the header's dtype field
    itemsize: int  # bytes an element
    prefix: int  # bytes before the elements (int8's scale)

    def encoded_len(self, elems: int) -> int:
        return self.prefix + self.itemsize * elems

    def plan(self, n_params: int, payload_bytes: int) -> ChunkPlan:
        """Chunks of as many elements as fit payload_bytes once encoded."""
        elems = (payload_bytes - self.prefix) // self.itemsize
        if elems <= 0:
            raise ValueError(f"a {payload_bytes}-byte payload holds no {self.name} element")
        return ChunkPlan(n_params, 4 * elems)

    def encode(self, x: np.ndarray, out: np.ndarray, chunk: int) -> int:
        """Encode x (float32, whole chunks of `chunk` elements, the last may be short) into
        out; returns the bytes written."""
        n = x.shape[0]
        if self.name == "float32":
            out[: 4 * n] = x.view(np.uint8)
        else:
            _KERNELS[self.name][0](x, out, chunk)
        return self.itemsize * n + self.prefix * (-(-n // chunk) if n else 0)

    def decode(self, payload, out: np.ndarray, chunk: int) -> None:
        """out (float32) = what encode() wrote to payload."""
        if self.name == "float32":
            out[:] = np.frombuffer(payload, "<f4", out.shape[0])
        else:
            _KERNELS[self.name][1](payload, out, chunk)


_KERNELS = {  # name: (encode, decode), each taking (source, destination, chunk)
    "float16": (lambda x, o, c: kernels.f16_encode(x, o), lambda p, o, c: kernels.f16_decode(p, o)),
    "bfloat16": (
        lambda x, o, c: kernels.bf16_encode(x, o),
        lambda p, o, c: kernels.bf16_decode(p, o),
    ),
    "int8": (kernels.i8_encode, kernels.i8_decode),
}

CODECS = {
    "float32": Codec("float32", wire.DTYPE_F32, 4, 0),
    "float16": Codec("float16", wire.DTYPE_F16, 2, 0),
    "bfloat16": Codec("bfloat16", wire.DTYPE_BF16, 2, 0),
    "int8": Codec("int8", wire.DTYPE_I8, 1, 4),
}


def codec(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"payload must be one of {', '.join(NAMES)}") from None


class Roundtrip:
    """What a receiver makes of a vector sent with a codec (the simulator's wire): encoded
    and decoded again, with buffers kept for reuse. float32 gives the vector itself."""

    def __init__(self, c: Codec, n_params: int, chunk: int):
        self.codec, self.chunk = c, chunk
        if c.name != "float32":
            self.raw = np.empty(
                c.encoded_len(n_params) + c.prefix * (-(-n_params // chunk)), np.uint8
            )
            self.out = np.empty(n_params, np.float32)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if self.codec.name == "float32":
            return x
        out = self.out[: x.shape[0]] if out is None else out
        n = self.codec.encode(x, self.raw, self.chunk)
        self.codec.decode(self.raw[:n], out, self.chunk)
        return out
