"""Every kind of bad datagram is dropped and counted under its reason; the model is unchanged."""

import time

import numpy as np
import pytest
from helpers.datagrams import reseal

from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder

KEY = b"k" * 32
PLAN = ChunkPlan(1000, 400)


def _datagrams(x, round=0, key=KEY, fleet=1, sender=2):
    enc = Encoder(PLAN, key, fleet, sender)
    return [bytes(d)[3:] for d in enc.chunks(x, wire.MsgType.PARAMS, round)]


def _collect(inbox, sender=2, round=0):
    out = np.zeros(PLAN.n_params, np.float32)
    mask = np.zeros(PLAN.n_chunks, np.uint8)
    got = inbox.rounds.collect(
        sender, wire.MsgType.PARAMS, round, time.monotonic() + 0.05, out, mask
    )
    return got, out, mask


def test_valid_model_arrives_whole():
    x = np.arange(1000, dtype=np.float32)
    inbox = Inbox.build(PLAN, KEY, 1)
    for d in _datagrams(x):
        inbox.ingest(memoryview(d))
    got, out, mask = _collect(inbox)
    assert got == PLAN.n_chunks and mask.all()
    np.testing.assert_array_equal(out, x)
    assert inbox.counter.dropped == 0


def _forge_payload(body, fn, key=KEY):
    """Rebuild a datagram with a modified payload and a valid tag (an insider's mistake)."""
    h = wire.unpack(memoryview(body))._replace(seq=100)  # fresh: above what was accepted
    b = bytearray(body)
    wire.pack_into(b, 0, h)
    fn(b, h)
    return bytes(reseal(b, key))


def _nan(b, h):
    b[wire.HEADER_SIZE : wire.HEADER_SIZE + 4] = np.array([np.nan], np.float32).tobytes()


def _offset_past_end(b, h):
    wire.pack_into(b, 0, h._replace(byte_offset=4000, chunk_index=2))


CASES = {
    "truncated": lambda ds: ds[0][:30],
    "truncated_tail": lambda ds: ds[0][:-3],
    "random": lambda ds: bytes(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8)),
    "oversized": lambda ds: ds[0] + b"\x00" * 9000,
    "bad_tag": lambda ds: ds[0][:-1] + bytes([ds[0][-1] ^ 1]),
    "wrong_key": lambda ds: _datagrams(np.zeros(1000, np.float32), key=b"z" * 32)[0],
    "wrong_fleet": lambda ds: _datagrams(np.zeros(1000, np.float32), fleet=9)[0],
    "non_finite": lambda ds: _forge_payload(ds[0], _nan),
    "out_of_bounds": lambda ds: _forge_payload(ds[0], _offset_past_end),
}
EXPECTED = {
    "truncated": "truncated",
    "truncated_tail": "truncated",
    "random": None,
    "oversized": "oversized",
    "bad_tag": "bad_tag",
    "wrong_key": "bad_tag",
    "wrong_fleet": "wrong_fleet",
    "non_finite": "non_finite",
    "out_of_bounds": "out_of_bounds",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_datagram_dropped_and_counted(case):
    x = np.arange(1000, dtype=np.float32)
    inbox = Inbox.build(PLAN, KEY, 1)
    for d in _datagrams(x):
        inbox.ingest(memoryview(d))
    before = _collect(inbox)[1].copy()
    bad = CASES[case](_datagrams(np.full(1000, 5, np.float32), round=0))
    inbox.ingest(memoryview(bad))
    assert inbox.counter.dropped == 1
    if EXPECTED[case]:
        assert inbox.counter.drops[EXPECTED[case]] == 1, inbox.counter.drops
    np.testing.assert_array_equal(_collect(inbox)[1], before)


def test_replayed_datagram_dropped():
    x = np.arange(1000, dtype=np.float32)
    inbox = Inbox.build(PLAN, KEY, 1)
    ds = _datagrams(x)
    for d in ds:
        inbox.ingest(memoryview(d))
    inbox.ingest(memoryview(ds[1]))
    assert inbox.counter.drops["replayed"] == 1 and inbox.counter.accepted == len(ds)


def test_partial_round_reports_mask():
    x = np.arange(1000, dtype=np.float32)
    inbox = Inbox.build(PLAN, KEY, 1)
    ds = _datagrams(x)
    inbox.ingest(memoryview(ds[0]))
    inbox.ingest(memoryview(ds[2]))
    got, out, mask = _collect(inbox)
    assert got == 2 and mask.tolist() == [1, 0, 1] + [0] * 7
    np.testing.assert_array_equal(out[:100], x[:100])


def test_round_before_last_dropped_new_round_resets():
    inbox = Inbox.build(PLAN, KEY, 1)
    enc = Encoder(PLAN, KEY, 1, 2)
    for r in (4, 5):
        for d in enc.chunks(np.ones(1000, np.float32), 1, r, chunks=[1, 2]):
            inbox.ingest(memoryview(bytes(d)[3:]))
    late = bytes(next(enc.chunks(np.zeros(1000, np.float32), 1, 4)))[3:]  # chunk 0 of round 4
    inbox.ingest(memoryview(late))
    assert inbox.counter.drops["old_round"] == 0
    assert _collect(inbox, round=4)[0] == 3  # the late chunk joined the round before
    old = bytes(next(enc.chunks(np.zeros(1000, np.float32), 1, 3)))[3:]
    inbox.ingest(memoryview(old))
    assert inbox.counter.drops["old_round"] == 1
    inbox.ingest(memoryview(bytes(next(enc.chunks(np.zeros(1000, np.float32), 1, 6)))[3:]))
    got, _, mask = _collect(inbox, round=6)
    assert got == 1 and mask.tolist() == [1] + [0] * 9


def test_unknown_sender_dropped():
    inbox = Inbox.build(PLAN, KEY, 1, peers={5})
    inbox.ingest(memoryview(_datagrams(np.ones(1000, np.float32))[0]))
    assert inbox.counter.drops["unknown_sender"] == 1


def test_link_loss_counts_sequence_gaps():
    enc = Encoder(PLAN, KEY, 1, 2)
    inbox = Inbox.build(PLAN, KEY, 1)
    ds = [bytes(d)[3:] for d in enc.chunks(np.ones(1000, np.float32), 1, 0)]
    for k, d in enumerate(ds):
        if k % 5 != 1:  # lose 2 of 10
            inbox.ingest(memoryview(d))
    # datagrams 1 and 6 of 0..9 lost; 0 and 9, the first and last arrivals, are not counted
    assert inbox.links.loss() == (6, 8)


def test_rps_block_outside_the_fleet_is_out_of_bounds():
    inbox = Inbox.build(PLAN, KEY, 1, rps_blocks=4)
    enc = Encoder(PLAN, KEY, 1, 2)
    d = bytes(
        next(enc.chunks(np.ones(1000, np.float32), wire.MsgType.REDUCE, 1, chunks=[0], block=9))
    )[3:]
    inbox.ingest(memoryview(d))  # tagged, but names a block no server holds: no exception
    assert inbox.counter.drops == {"out_of_bounds": 1}


_ENCODERS: dict = {}


def _send(inbox, sender, x, round=1):
    """One round from sender; an encoder per (inbox, sender), so sequence numbers go on."""
    enc = _ENCODERS.setdefault((id(inbox), sender), Encoder(PLAN, KEY, 1, sender))
    for d in enc.chunks(x, wire.MsgType.PARAMS, round):
        inbox.ingest(memoryview(bytes(d)[3:]))


def test_shared_receive_buffers_serve_exchanges_not_peers():
    """Two pooled buffers for three senders: the third concurrent round is dropped as no_buffer;
    a borrowed round is read in place and its buffer serves the next sender once given back."""
    inbox = Inbox.build(PLAN, KEY, 1, receive_buffers=2, stale_s=60)
    xs = {s: np.full(1000, s, np.float32) for s in (2, 3, 4)}
    _send(inbox, 2, xs[2])
    _send(inbox, 3, xs[3])
    _send(inbox, 4, xs[4])
    assert inbox.counter.drops["no_buffer"] == PLAN.n_chunks and inbox.rounds.pool.made == 2
    r, got = inbox.rounds.borrow(2, wire.MsgType.PARAMS, 1)
    assert got == PLAN.n_chunks and r.mask.all()
    np.testing.assert_array_equal(r.buf, xs[2])
    inbox.rounds.give_back(r)
    assert r.buf is None and len(inbox.rounds.pool.free) == 1
    _send(inbox, 4, xs[4], round=2)  # the freed buffer takes the next round
    r4, got4 = inbox.rounds.borrow(4, wire.MsgType.PARAMS, 2)
    assert got4 == PLAN.n_chunks
    np.testing.assert_array_equal(r4.buf, xs[4])
    inbox.rounds.give_back(r4)
    assert inbox.rounds.pool.made == 2  # never more than two model-sized buffers
    # a late chunk of a round already merged is dropped, not given a buffer
    enc = _ENCODERS[(id(inbox), 2)]
    late = bytes(next(iter(enc.chunks(xs[2], wire.MsgType.PARAMS, 1))))[3:]
    inbox.ingest(memoryview(late))
    assert inbox.counter.drops["collected"] == 1 and len(inbox.rounds.pool.free) == 1


def test_a_round_nobody_collects_gives_its_buffer_up():
    inbox = Inbox.build(PLAN, KEY, 1, receive_buffers=1, stale_s=0.05)
    _send(inbox, 2, np.ones(1000, np.float32))
    time.sleep(0.1)
    _send(inbox, 3, np.full(1000, 3, np.float32))
    assert inbox.counter.drops.get("no_buffer", 0) == 0
    r, got = inbox.rounds.borrow(3, wire.MsgType.PARAMS, 1)
    assert got == PLAN.n_chunks and float(r.buf[0]) == 3.0
    inbox.rounds.give_back(r)
    assert inbox.rounds.borrow(2, wire.MsgType.PARAMS, 1) == (
        None,
        0,
    )  # its buffer went to sender 3


def test_every_drop_is_lost_late_or_refused_as_declared():
    """Issue 44: a person reads three numbers, not one `dropped`."""
    from edgegossip.dataplane.drops import DROPS, fates

    assert {kind for kind, _ in DROPS.values()} == {"lost", "late", "refused"}
    drops = {"bad_tag": 3, "collected": 2, "no_buffer": 1, "replayed": 4, "injected_loss": 10}
    assert fates(drops, arrived=90, expected=100) == {"lost": 10, "late": 3, "refused": 7}
    # a bad datagram of the cases above is refused; an authentic one that came too late is late
    assert all(DROPS[r][0] == "refused" for r in EXPECTED.values() if r)
    assert DROPS["collected"][0] == DROPS["no_buffer"][0] == "late"


def test_a_reload_refuses_a_removed_peer_and_admits_an_added_one(free_udp_port):
    """DataPlane.use_keys, as an agent's reload calls it (agent/reload.py): from then on the
    removed sender's authentic datagrams are unknown_sender, the added one's let in."""
    from edgegossip.dataplane.keys import LinkKeys
    from edgegossip.dataplane.plane import DataPlane, PlaneSpec

    spec = PlaneSpec("udp", ("127.0.0.1", free_udp_port()), 1, 0, senders=frozenset({2}))
    with DataPlane(spec, PLAN, LinkKeys.of(KEY)) as plane:
        x = np.ones(1000, np.float32)
        plane.inbox.ingest(memoryview(_datagrams(x, sender=2)[0]))
        assert plane.inbox.counter.accepted == 1
        plane.use_keys(LinkKeys.of(KEY), frozenset({3}))
        plane.inbox.ingest(memoryview(_datagrams(x, sender=2)[1]))
        plane.inbox.ingest(memoryview(_datagrams(x, sender=3)[0]))
        assert plane.inbox.counter.drops["unknown_sender"] == 1
        assert plane.inbox.counter.accepted == 2
