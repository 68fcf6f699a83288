"""Compressed payloads end to end through the data plane: encoded per datagram by the Encoder,
checked and decoded by the Inbox, each chunk in as many datagram bytes as the codec says."""

import time

import numpy as np
import pytest
from helpers.datagrams import reseal

from edgegossip.config import AgentConfig, ConfigError
from edgegossip.dataplane import payload, wire
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder

KEY = b"k" * 32
N = 10_000
# the fleet's initial model, which delta4 sends against: weights of a layer's scale
X0 = np.random.default_rng(1).standard_normal(N, dtype=np.float32) * np.float32(0.05)


def codec_of(name: str) -> payload.Codec:
    return payload.codec(name, reference=X0)


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
    codec = codec_of(name)
    x = np.random.default_rng(0).standard_normal(N, dtype=np.float32) * np.float32(0.05)
    plan, ds = _send(codec, x, encrypt)
    inbox, got, out, mask = _receive(codec, plan, ds)
    assert got == plan.n_chunks and mask.all() and inbox.counter.dropped == 0
    want = payload.Roundtrip(codec, N, plan.chunk_elems)(x)
    np.testing.assert_array_equal(out, want)  # the agent's wire is the simulator's, bit for bit
    payload_bytes = sum(len(d) - wire.HEADER_SIZE - wire.TAG_SIZE for d in ds)
    assert payload_bytes == codec.bits * N // 8 + codec.prefix * plan.n_chunks
    if name == "delta4":  # the step rides in the header: 8x float32's datagrams, exactly
        f32 = payload.codec("float32").plan(N, wire.default_chunk_bytes())
        assert plan.chunk_elems == 8 * f32.chunk_elems
    tol = {"float32": 0, "float16": 2**-11, "bfloat16": 2**-8}.get(name)
    if tol is not None:
        assert np.abs(out - x).max() <= tol * np.abs(x).max()
    elif name == "int8":  # half a step of its chunk's largest value
        assert np.abs(out - x).max() <= np.abs(x).max() / 127 / 2 * 1.0001
    else:  # delta4: a step of its chunk's largest distance from x0 (rounded up to a bfloat16;
        # a dithered rounding moves a value to either step around it)
        assert np.abs(out - x).max() <= np.abs(x - X0).max() / 7 * (1 + 2**-7)


def test_datagram_counts_shrink_with_the_codec():
    counts = {
        n: payload.codec(n).plan(N, wire.default_chunk_bytes()).n_chunks for n in payload.NAMES
    }
    assert counts["float16"] == counts["bfloat16"] == -(-counts["float32"] // 2)
    assert counts["int8"] <= -(-counts["float32"] // 4) + 1
    assert counts["delta4"] <= -(-counts["float32"] // 8) + 1


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


def test_delta4_decodes_each_datagram_alone_and_moves_with_training_not_weights():
    """Lose every other datagram: each one that arrives decodes exactly as it would have with
    all of them (nothing is kept per link), against the receiver's own copy of x0. A model
    near x0 (as after a few steps, or a fine-tuned one) arrives to within a step, its largest
    distance from x0 over 7, whatever its weights' size."""
    codec = codec_of("delta4")
    x = X0 + np.random.default_rng(2).standard_normal(N, dtype=np.float32) * np.float32(1e-3)
    plan, ds = _send(codec, x)
    inbox, got, out, mask = _receive(codec, plan, ds[::2])
    assert got == len(ds[::2]) and inbox.counter.dropped == 0
    want = payload.Roundtrip(codec, N, plan.chunk_elems)(x)
    arrived = np.repeat(mask.astype(bool), plan.chunk_elems)[:N]
    assert mask[::2].all() and not mask[1::2].any()
    np.testing.assert_array_equal(out[arrived], want[arrived])
    assert np.abs(out[arrived] - x[arrived]).max() <= np.abs(x - X0).max() / 7 * (1 + 2**-7)
    assert np.abs(x - X0).max() / 7 < 1e-2 * np.abs(x).max()  # far finer than the weights


def test_delta4_of_a_non_finite_model_is_dropped_and_a_config_must_send_the_model_itself():
    codec = codec_of("delta4")
    x = X0.copy()
    x[5] = np.inf
    plan, ds = _send(codec, x)
    inbox, got, _, _ = _receive(codec, plan, ds)
    assert got == plan.n_chunks - 1 and inbox.counter.drops["non_finite"] == 1
    with pytest.raises(ConfigError, match="net.payload: delta4 sends the model's distance"):
        AgentConfig(id=0, listen="127.0.0.1:9", payload="delta4", algorithm="gossip-push")


def test_delta4_rounds_without_bias_so_small_distances_are_not_lost():
    """Nearest rounding would send every distance below half a step as 0, round after round;
    the dither sends each as 0 or a step, as often as makes its mean right: over 9,990
    parameters all moved by 1e-3, a seventh of the step, the mean arrives."""
    codec = codec_of("delta4")
    wire_copy = payload.Roundtrip(codec, N, codec.plan(N, wire.default_chunk_bytes()).chunk_elems)
    x = X0 + np.float32(1e-3)
    x[::1000] += np.float32(0.05)  # a few large moves set the step, (0.051 / 7)
    small = np.ones(N, bool)
    small[::1000] = False
    got = wire_copy(x)[small] - X0[small]
    assert set(np.round(np.unique(got) / (0.051 / 7)).tolist()) <= {0.0, 1.0}
    assert abs(float(got.mean()) - 1e-3) < 1e-4
