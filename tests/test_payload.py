"""Compressed payloads end to end through the data plane: encoded per datagram by the Encoder,
checked and decoded by the Inbox, each chunk in as many datagram bytes as the codec says."""

import time

import numpy as np
import pytest
from helpers.datagrams import reseal

from edgegossip.dataplane import payload, wire
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder

KEY = b"k" * 32
N = 10_000


def _send(codec, x, encrypt=False, round=1):
    plan = codec.plan(N, wire.default_chunk_bytes())
    enc = Encoder(plan, KEY, 1, 2, encrypt=encrypt, codec=codec)
    return plan, [bytes(d)[3:] for d in enc.chunks(x, wire.MsgType.PARAMS, round)]


def _receive(codec, plan, datagrams):
    inbox = Inbox.build(plan, KEY, 1, codec=codec)
    for d in datagrams:
        inbox.ingest(memoryview(d))
    out = np.zeros(N, np.float32)
    mask = np.zeros(plan.n_chunks, np.uint8)
    got = inbox.rounds.collect(2, wire.MsgType.PARAMS, 1, time.monotonic() + 0.05, out, mask)
    return inbox, got, out, mask


@pytest.mark.parametrize("name", payload.NAMES)
@pytest.mark.parametrize("encrypt", [False, True])
def test_every_codec_arrives_as_the_simulators_roundtrip(name, encrypt):
    codec = payload.codec(name)
    x = np.random.default_rng(0).standard_normal(N, dtype=np.float32) * np.float32(0.05)
    plan, ds = _send(codec, x, encrypt)
    inbox, got, out, mask = _receive(codec, plan, ds)
    assert got == plan.n_chunks and mask.all() and inbox.counter.dropped == 0
    want = payload.Roundtrip(codec, N, plan.chunk_elems)(x)
    np.testing.assert_array_equal(out, want)  # the agent's wire is the simulator's, bit for bit
    payload_bytes = sum(len(d) - wire.HEADER_SIZE - wire.TAG_SIZE for d in ds)
    assert payload_bytes == codec.itemsize * N + codec.prefix * plan.n_chunks
    tol = {"float32": 0, "float16": 2**-11, "bfloat16": 2**-8}.get(name)
    if tol is not None:
        assert np.abs(out - x).max() <= tol * np.abs(x).max()
    else:  # int8: half a step of its chunk's largest value
        assert np.abs(out - x).max() <= np.abs(x).max() / 127 / 2 * 1.0001


def test_datagram_counts_shrink_with_the_codec():
    counts = {
        n: payload.codec(n).plan(N, wire.default_chunk_bytes()).n_chunks for n in payload.NAMES
    }
    assert counts["float16"] == counts["bfloat16"] == -(-counts["float32"] // 2)
    assert counts["int8"] <= -(-counts["float32"] // 4) + 1


def test_a_payload_in_another_encoding_is_dropped():
    f16 = payload.codec("float16")
    _, ds = _send(f16, np.ones(N, np.float32))
    i8 = payload.codec("int8")
    inbox, got, out, _ = _receive(i8, i8.plan(N, wire.default_chunk_bytes()), ds)
    assert got == 0 and not out.any()
    assert inbox.counter.drops["bad_dtype"] == len(ds)


def test_a_wrong_length_or_a_nan_scale_changes_nothing():
    i8 = payload.codec("int8")
    plan, ds = _send(i8, np.ones(N, np.float32))

    def forged(fn):
        b = bytearray(ds[0])
        h = wire.unpack(memoryview(b))._replace(seq=100)
        wire.pack_into(b, 0, h)
        fn(b, h)
        return bytes(reseal(b, KEY))

    nan_scale = forged(
        lambda b, h: b.__setitem__(
            slice(wire.HEADER_SIZE, wire.HEADER_SIZE + 4), np.array([np.nan], "<f4").tobytes()
        )
    )
    h = wire.unpack(memoryview(ds[0]))._replace(seq=101)
    short = bytearray(ds[0][:-4])  # one element fewer than the chunk holds, correctly tagged
    wire.pack_into(short, 0, h._replace(length=h.length - 4))
    short = bytes(reseal(short, KEY))
    inbox, got, out, _ = _receive(i8, plan, [nan_scale, short])
    assert got == 0 and not out.any()
    assert inbox.counter.drops["non_finite"] == 1 and inbox.counter.drops["out_of_bounds"] == 1


def test_a_codec_that_cannot_fit_a_datagram_is_refused():
    with pytest.raises(ValueError):
        payload.codec("int8").plan(N, 4)
    with pytest.raises(ValueError):
        payload.codec("float64")
