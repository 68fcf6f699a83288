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

delta4 sends each parameter's distance from the fleet's initial model (the one every device
starts from and can make again: the seed, or the compiled model's initial.npy) in 4 bits:
-7 .. 7 steps of max|x - x0| / 7 of that chunk, rounded stochastically. The step, rounded up
to a bfloat16, rides in the header's weight field (push-sum's, which the algorithms that send
the model itself leave unused), so a datagram holds codes alone: exactly 8 times float32's
elements, and with `train.slices 2` an exchange sends a sixteenth of float32's bytes. A
receiver adds the codes to its own copy of x0, so each datagram still decodes alone and nothing
is kept per link. Being relative, its error scales with how far training has moved the model,
not with the weights: absolute 4-bit codes cost the seed MLP 2.6 points against int8 through
10% loss, delta4 0.3-0.4 (docs/results.md), and a fine-tuned model, which stays near its
pretrained x0, fits it best. Nearest rounding would drop every distance below half a step,
round after round (logreg from a zero initialisation lost 4.8 points to it); the dither keeps
each one's mean.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from edgegossip import kernels
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan

NAMES = ("float32", "float16", "bfloat16", "int8", "delta4")


@dataclass(frozen=True)
class Codec:
    name: str
    dtype: int  # the header's dtype field
    bits: int  # an element's
    prefix: int  # bytes before a chunk's elements (int8's scale, delta4's step)
    relative: bool = False  # sends x - reference (delta4): needs the fleet's initial model
    # the fleet's initial model a relative codec sends against (with_reference)
    reference: np.ndarray | None = field(default=None, compare=False, repr=False)

    def encoded_len(self, elems: int) -> int:
        """Bytes of one chunk of `elems` elements."""
        return self.prefix + -(-self.bits * elems // 8)

    def encoded_bytes(self, n: int, chunk: int) -> int:
        """Bytes of n elements cut into chunks of `chunk` (the last may be short)."""
        full, rest = divmod(n, chunk)
        return full * self.encoded_len(chunk) + (self.encoded_len(rest) if rest else 0)

    def with_reference(self, x0: np.ndarray) -> Codec:
        """This codec sending against x0 (a relative one; the others ignore it)."""
        return replace(self, reference=x0) if self.relative else self

    def plan(self, n_params: int, payload_bytes: int) -> ChunkPlan:
        """Chunks of as many elements as fit payload_bytes once encoded."""
        elems = (payload_bytes - self.prefix) * 8 // self.bits
        if elems <= 0:
            raise ValueError(f"a {payload_bytes}-byte payload holds no {self.name} element")
        return ChunkPlan(n_params, 4 * elems)

    def encode(self, x: np.ndarray, out: np.ndarray, chunk: int, first: int = 0, steps=None) -> int:
        """Encode x (float32, whole chunks of `chunk` elements, the last may be short; element
        `first` of the model) into out; returns the bytes written. A relative codec writes each
        chunk's step (its header's weight field) to `steps`."""
        n = x.shape[0]
        if self.name == "float32":
            out[: 4 * n] = x.view(np.uint8)
        elif self.relative:
            d4_encode(x, self._ref(first, n), out, chunk, steps)
        else:
            _KERNELS[self.name][0](x, out, chunk)
        return self.encoded_bytes(n, chunk)

    def decode(self, payload, out: np.ndarray, chunk: int, first: int = 0, steps=None) -> None:
        """out (float32) = what encode() wrote to payload (and, relative, to steps)."""
        if self.name == "float32":
            out[:] = np.frombuffer(payload, "<f4", out.shape[0])
        elif self.relative:
            d4_decode(payload, self._ref(first, out.shape[0]), out, chunk, steps)
        else:
            _KERNELS[self.name][1](payload, out, chunk)

    def _ref(self, first: int, n: int) -> np.ndarray:
        if self.reference is None:
            raise ValueError(f"{self.name} sends against the fleet's initial model: none given")
        return self.reference[first : first + n]


D4_LEVELS = 7  # codes -7 .. 7 steps, stored as 1 .. 15 in a nibble (0 unused)


def d4_step(top: float) -> int:
    """The bfloat16 bits of a chunk's step, max|x - x0| / 7 rounded up so that no code clips:
    0 for a chunk at x0 (or closer than the smallest normal float), NaN's for one not finite."""
    step = np.float32(top / D4_LEVELS)
    if not np.isfinite(step):
        return 0x7FC0
    if step < np.finfo(np.float32).tiny:
        return 0
    bits = int(step.view(np.uint32)) >> 16
    return bits + 1 if d4_float(bits) < step else bits


def d4_float(bits: int) -> np.float32:
    return np.uint32(bits << 16).view(np.float32)


def d4_encode(x: np.ndarray, ref: np.ndarray, out: np.ndarray, chunk: int, steps) -> None:
    """delta4 of x against ref, chunk by chunk: its step (d4_step) to steps[k], and the codes
    floor((x - ref) / step + u) + 8 to out, two a byte, the first element in the low nibble.
    u is a dither drawn from a stream seeded by the chunk's own bytes: the rounding is
    unbiased, yet a chunk encodes alike wherever it is encoded (the simulator's wire is the
    agent's, bit for bit)."""
    n, at = x.shape[0], 0
    for k, a in enumerate(range(0, n, chunk)):
        d = x[a : a + chunk] - ref[a : a + chunk]
        steps[k] = bits = d4_step(float(np.abs(d).max()) if d.size else 0.0)
        q = np.full(d.size + d.size % 2, 8, np.uint8)
        step = d4_float(bits)
        if np.isfinite(step) and step > 0:
            u = np.random.default_rng(zlib.crc32(d)).random(d.size, dtype=np.float32)
            q[: d.size] = np.clip(np.floor(d / step + u), -D4_LEVELS, D4_LEVELS).astype(np.int8) + 8
        packed = q[0::2] | (q[1::2] << 4)
        out[at : at + packed.size] = packed
        at += packed.size


def d4_decode(payload, ref: np.ndarray, out: np.ndarray, chunk: int, steps) -> None:
    """out = ref + the steps d4_encode wrote (NaN where a chunk's step is not finite)."""
    raw = np.frombuffer(payload, np.uint8)
    n, at = out.shape[0], 0
    for k, a in enumerate(range(0, n, chunk)):
        m = min(chunk, n - a)
        packed = raw[at : at + -(-m // 2)]
        q = np.empty(packed.size * 2, np.int8)
        q[0::2], q[1::2] = packed & 15, packed >> 4
        np.multiply(q[:m] - 8, d4_float(int(steps[k])), out=out[a : a + m], casting="unsafe")
        out[a : a + m] += ref[a : a + m]
        at += packed.size


_KERNELS = {  # name: (encode, decode), each taking (source, destination, chunk)
    "float16": (lambda x, o, c: kernels.f16_encode(x, o), lambda p, o, c: kernels.f16_decode(p, o)),
    "bfloat16": (
        lambda x, o, c: kernels.bf16_encode(x, o),
        lambda p, o, c: kernels.bf16_decode(p, o),
    ),
    "int8": (kernels.i8_encode, kernels.i8_decode),
}

CODECS = {
    "float32": Codec("float32", wire.DTYPE_F32, 32, 0),
    "float16": Codec("float16", wire.DTYPE_F16, 16, 0),
    "bfloat16": Codec("bfloat16", wire.DTYPE_BF16, 16, 0),
    "int8": Codec("int8", wire.DTYPE_I8, 8, 4),
    "delta4": Codec("delta4", wire.DTYPE_D4, 4, 0, relative=True),
}


# the codecs the compiled framer and inbox also run (native/_codec.pxi); a relative one is
# encoded and decoded here, against its reference
COMPILED = tuple(name for name, c in CODECS.items() if not c.relative)


def codec(name: str, reference: np.ndarray | None = None) -> Codec:
    """The codec `name`; a relative one sends against `reference`, the fleet's initial model."""
    try:
        c = CODECS[name]
    except KeyError:
        raise ValueError(f"payload must be one of {', '.join(NAMES)}") from None
    return c.with_reference(reference) if reference is not None else c


class Roundtrip:
    """What a receiver makes of a vector sent with a codec (the simulator's wire): encoded
    and decoded again, with buffers kept for reuse. float32 gives the vector itself."""

    def __init__(self, c: Codec, n_params: int, chunk: int):
        self.codec, self.chunk = c, chunk
        if c.name != "float32":
            self.raw = np.empty(c.encoded_bytes(n_params, chunk), np.uint8)
            self.out = np.empty(n_params, np.float32)
            self.steps = np.zeros(-(-n_params // chunk), np.uint16)  # a relative codec's

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None, first: int = 0) -> np.ndarray:
        """x (element `first` of the model on) as a receiver decodes it."""
        if self.codec.name == "float32":
            return x
        out = self.out[: x.shape[0]] if out is None else out
        n = self.codec.encode(x, self.raw, self.chunk, first, self.steps)
        self.codec.decode(self.raw[:n], out, self.chunk, first, self.steps)
        return out
