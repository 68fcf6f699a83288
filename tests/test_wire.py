import numpy as np
import pytest

from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.outbox import Encoder
from edgegossip.dataplane.replay import WINDOW, ReplayWindow

KEY = b"k" * 32


def test_header_roundtrip_and_size():
    h = wire.Header(2, 1, 1, 0, 7, 3, 4, 2, 0, 17, 99, 5, 10, 5 * 1412, 1412, 2**63 + 5)
    buf = bytearray(wire.HEADER_SIZE + 1412 + wire.TAG_SIZE)
    wire.pack_into(buf, 0, h)
    assert wire.HEADER_SIZE == 48
    assert wire.unpack(memoryview(buf)) == h


def test_chunk_sizes_fit_mtu_and_libzmq():
    d = wire.default_chunk_bytes()
    assert d % 4 == 0 and d + wire.framing_overhead() <= 1472
    m = wire.max_chunk_bytes()
    assert m + wire.HEADER_SIZE + wire.TAG_SIZE <= 8192 - 1 - len(wire.DEFAULT_GROUP)
    with pytest.raises(ValueError):
        wire.check_chunk_bytes(m + 4)
    with pytest.raises(ValueError):
        wire.check_chunk_bytes(1413)


@pytest.mark.parametrize("mutate,reason", [
    (lambda b: b[:20], "truncated"),
    (lambda b: b[:-1], "truncated"),
    (lambda b: bytes([1]) + b[1:], "bad_version"),
    (lambda b: b[:14] + bytes([1]) + b[15:], "bad_version"),  # reserved bytes set
    (lambda b: b[:1] + bytes([9]) + b[2:], "bad_type"),
    (lambda b: b[:2] + bytes([2]) + b[3:], "bad_dtype"),
])
def test_unpack_rejects(mutate, reason):
    plan = ChunkPlan(1000, 400)
    enc = Encoder(plan, KEY, 1, 2)
    body = bytes(next(enc.chunks(np.zeros(1000, np.float32), wire.MsgType.PARAMS, 0)))[3:]
    with pytest.raises(wire.WireError) as e:
        wire.unpack(mutate(body))
    assert e.value.reason == reason


def test_tag_covers_group_header_and_payload():
    plan = ChunkPlan(1000, 400)
    enc = Encoder(plan, KEY, 1, 2)
    body = bytearray(bytes(next(enc.chunks(np.ones(1000, np.float32), 1, 0)))[3:])
    h = wire.unpack(memoryview(body))
    end = wire.HEADER_SIZE + h.length

    def ok(b, key=KEY, group=wire.DEFAULT_GROUP):
        return wire.body_tag(key, b[:end], group) == bytes(b[end:])
    assert ok(body)
    for pos in (6, 10, 16, 45, 53):  # sender, receiver, session, seq, a payload byte
        forged = bytearray(body)
        forged[pos] ^= 1
        assert not ok(forged)
    assert not ok(body, key=b"x" * 32)
    assert not ok(body, group=b"eh")


def test_replay_window():
    w = ReplayWindow()
    assert w.check(100) is None
    assert w.check(100) == "replayed"
    assert w.check(98) is None          # reordered but new
    assert w.check(98) == "replayed"
    assert w.check(100 + WINDOW) is None
    assert w.check(100) == "stale"
    assert w.check(10**15) is None
    assert w.reason(10**15 + 1) is None and w.reason(10**15) == "replayed"
    assert w.highest == 10**15          # reason() records nothing


def test_chunk_plan_blocks_cover_model():
    plan = ChunkPlan(2_913_290, wire.default_chunk_bytes())
    for n_blocks in (1, 4, 7, 8):
        covered = [c for b in range(n_blocks) for c in plan.block_chunks(b, n_blocks)]
        assert covered == list(range(plan.n_chunks))
    assert plan.chunk_range(plan.n_chunks - 1)[1] == plan.model_bytes
