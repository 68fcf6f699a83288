"""The compiled wire path (edgegossip._wire_c) against the Python definition: the same AEAD, the
same datagram bytes, and an inbox fed through the fast path ends in exactly the state of one fed
datagram by datagram, for a stream mixing good datagrams with every kind of bad one."""

import struct

import numpy as np
import pytest
from helpers.datagrams import reseal

from edgegossip.dataplane import payload, wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder
from edgegossip.dataplane.replay import ReplayWindow
from edgegossip.transport.udp import RECV_BUFFER, UdpTransport

_wire_c = pytest.importorskip("edgegossip._wire_c", reason="built without OpenSSL headers")

KEY = bytes(range(32))
PLAN = ChunkPlan(10_007, 1412)  # 29 chunks, the last one short


LENGTHS = (0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 1404, 1471, 8124, 8191)


@pytest.mark.parametrize("aad_len", [0, 3, 51, 67])
def test_openssl_aead_matches_the_python_reference(aad_len):
    from edgegossip.dataplane.aead import PyAead

    rng = np.random.default_rng(aad_len)
    key = rng.integers(0, 256, 32, dtype=np.uint8).tobytes()
    fast, ref = _wire_c.Aead(key), PyAead(key)
    for n in LENGTHS:
        nonce = rng.integers(0, 256, 12, dtype=np.uint8).tobytes()
        aad = rng.integers(0, 256, aad_len, dtype=np.uint8).tobytes()
        pt = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        sealed = fast.seal(nonce, aad, pt)
        assert sealed == ref.seal(nonce, aad, pt)
        assert fast.open(nonce, aad, sealed) == pt and ref.open(nonce, aad, sealed) == pt
        bad = bytearray(sealed)
        bad[int(rng.integers(len(bad)))] ^= 1
        assert fast.open(nonce, aad, bytes(bad)) is None


def _plan(codec):
    return payload.codec(codec).plan(PLAN.n_params, PLAN.chunk_bytes)


def _encoder(seq=1000, codec="float32"):
    enc = Encoder(_plan(codec), KEY, fleet=7, sender=3, codec=payload.codec(codec))
    enc._seq[5] = seq - 1  # both encoders number from the same point
    return enc


@pytest.mark.parametrize("chunks", [None, range(4, 20), range(28, 29), [5, 2, 9]])
@pytest.mark.parametrize("batch", [1, 7, 64])
@pytest.mark.parametrize("codec", payload.COMPILED)
def test_batches_frame_the_same_bytes_as_chunks(chunks, batch, codec):
    x = np.random.default_rng(0).standard_normal(PLAN.n_params, dtype=np.float32)
    if codec != "float32" and chunks is not None and max(chunks) >= _plan(codec).n_chunks:
        chunks = range(2, _plan(codec).n_chunks)
    one = [
        bytes(d) for d in _encoder(codec=codec).chunks(x, wire.MsgType.REDUCE, 9, chunks, 2, 1, 5)
    ]
    enc = _encoder(codec=codec)
    many = []
    for n in enc.batches(x, wire.MsgType.REDUCE, 9, chunks, 2, 1, 5, batch):
        assert n <= batch
        many += [enc.rows[i, : enc.lengths[i]].tobytes() for i in range(n)]
    assert many == one
    assert enc.datagrams == len(one) and enc.bytes == sum(map(len, one))


def test_replay_advance_equals_checks():
    rng = np.random.default_rng(1)
    for _ in range(50):
        a, b = ReplayWindow(), ReplayWindow()
        for s in rng.integers(0, 6000, 20):
            a.check(int(s))
            b.check(int(s))
        seqs = np.sort(rng.choice(np.arange(b.highest + 1, b.highest + 9000), 30, replace=False))
        for s in seqs:
            assert a.check(int(s)) is None
        b.advance(seqs)
        assert (a.highest, a.bits) == (b.highest, b.bits)


def _stream(codec="float32"):
    """Framed datagrams: two senders, two rounds each, interleaved, with bad ones among them.
    The bad ones that pass the tag come from a third sender, in the order it numbered them."""
    rng = np.random.default_rng(2)
    out = []
    c = payload.codec(codec)
    plan = _plan(codec)
    encs = {s: Encoder(plan, KEY, fleet=7, sender=s, codec=c) for s in (3, 4)}
    for rnd in (0, 1):
        for enc in encs.values():
            x = rng.standard_normal(PLAN.n_params, dtype=np.float32)
            out += [bytes(d) for d in enc.chunks(x, wire.MsgType.PARAMS, rnd)]
    zeros = np.zeros(PLAN.n_params, np.float32)
    nan = zeros.copy()
    nan[3] = np.nan
    third = Encoder(plan, KEY, fleet=7, sender=5, codec=c)
    past_end = bytearray(next(third.chunks(zeros, wire.MsgType.PARAMS, 1)))
    struct.pack_into("<I", past_end, 3 + 32, plan.model_bytes)
    past_end[3:] = reseal(past_end[3:], KEY)
    forged = bytearray(out[5])
    forged[60] ^= 1
    bad = [
        bytes(forged),  # bad_tag
        out[6],  # replayed
        out[7][:30],  # truncated
        b"\x02xx" + out[8][3:],  # bad_group
        b"\x80" + bytes(50),  # libzmq's abort
        bytes(
            next(Encoder(plan, KEY, fleet=8, sender=3, codec=c).chunks(zeros, 1, 0))
        ),  # wrong_fleet
        bytes(next(Encoder(plan, KEY, fleet=7, sender=9, codec=c).chunks(zeros, 1, 0))),  # unknown
        bytes(next(third.chunks(zeros, wire.MsgType.PARAMS, 1))),  # accepted
        bytes(next(third.chunks(nan, wire.MsgType.PARAMS, 1))),  # non_finite
        bytes(past_end),  # out_of_bounds
        bytes(next(third.chunks(zeros, wire.MsgType.PARAMS, 0))),  # old_round
    ]
    for k, d in enumerate(bad):
        out.insert(4 + 9 * k, d)
    return out


def _run(stream, fast, codec="float32"):
    inbox = Inbox.build(_plan(codec), KEY, 7, peers={3, 4, 5}, codec=payload.codec(codec))
    return inbox, _feed(inbox, stream, fast)


def _feed(inbox, stream, fast):
    """Hand stream to inbox as a transport would, 64 a batch; returns how many went through
    ingest() one by one."""
    t = UdpTransport()
    bufs = np.zeros((64, RECV_BUFFER), np.uint8)
    lengths = np.zeros(64, np.intp)
    rows = [memoryview(bufs[i]) for i in range(64)]
    slow = []

    def handler(body):
        slow.append(1)
        inbox.ingest(body)

    for first in range(0, len(stream), 64):
        part = stream[first : first + 64]
        for i, d in enumerate(part):
            bufs[i, : len(d)] = np.frombuffer(d, np.uint8)
            lengths[i] = len(d)
        t.deliver(
            bufs,
            rows,
            lengths,
            len(part),
            handler,
            inbox.counter.drop,
            inbox.fast if fast else None,
        )
    t.close()
    return len(slow)


@pytest.mark.parametrize("codec", payload.COMPILED)
def test_fast_path_leaves_the_inbox_as_the_python_path_does(codec):
    stream = _stream(codec)
    a, slow_a = _run(stream, False, codec)
    b, slow_b = _run(stream, True, codec)
    assert slow_a == len(stream) - a.counter.drops["bad_group"]  # framing is checked first
    # the fast path took all but the 9 bad ones that reach a handler and the 4 round openings
    assert slow_b == 13
    assert a.counter.snapshot() == b.counter.snapshot()
    assert a.counter.drops == {
        "bad_tag": 1,
        "replayed": 1,
        "truncated": 1,
        "bad_group": 2,
        "wrong_fleet": 1,
        "unknown_sender": 1,
        "non_finite": 1,
        "out_of_bounds": 1,
        "old_round": 1,
    }

    assert _links(a) == _links(b)
    _same_rounds(a, b)


def _links(inbox):
    return {
        s: (
            k.session,
            k.window.highest,
            k.window.bits,
            k.first,
            k.arrived,
            k.baseline,
        )
        for s, k in inbox.links.items()
    }


def _same_rounds(a, b):
    assert a.rounds.slots.keys() == b.rounds.slots.keys()
    for key, sa in a.rounds.slots.items():
        sb = b.rounds.slots[key]
        for ra, rb in ((sa.current, sb.current), (sa.previous, sb.previous)):
            assert (ra.round, ra.received, ra.expected, ra.collected) == (
                rb.round,
                rb.received,
                rb.expected,
                rb.collected,
            )
            np.testing.assert_array_equal(ra.mask, rb.mask)
            assert (ra.buf is None) == (rb.buf is None)
            if ra.buf is not None:
                np.testing.assert_array_equal(ra.buf.view(np.uint32), rb.buf.view(np.uint32))
    assert [e.__dict__ for e in a.rounds.events()] == [e.__dict__ for e in b.rounds.events()]


@pytest.mark.parametrize("codec", ["float32", "int8"])
def test_rounds_refused_for_want_of_a_buffer_are_dropped_by_the_fast_path_as_by_ingest(codec):
    """One shared receive buffer, three senders whose rounds interleave: the first holds it,
    the others' rounds are refused (no_buffer), and once the first is merged and given back,
    the rest of its round is dropped as collected. The compiled path takes those runs too and
    leaves the inbox (drop counts, the loss each link observed, the rounds) as ingest() does."""
    plan, c = _plan(codec), payload.codec(codec)
    rng = np.random.default_rng(7)
    encs = {s: Encoder(plan, KEY, fleet=7, sender=s, codec=c) for s in (3, 4, 5)}

    def whole(s, rnd):
        x = rng.standard_normal(PLAN.n_params, dtype=np.float32)
        return [bytes(d) for d in encs[s].chunks(x, wire.MsgType.PARAMS, rnd)]

    n = plan.n_chunks
    half = min(n, 4 * -(-(n // 2) // 4))  # chunks of the first part: bursts of 4
    earlier = {s: whole(s, 0) for s in (4, 5)}  # each link has had a round accepted
    now = {s: whole(s, 1) for s in (3, 4, 5)}
    first, rest = [], []
    for k in range(0, n, 4):  # bursts of 4 from each sender in turn, as paced senders send
        for s in (3, 4, 5):
            (first if k < half else rest).extend(now[s][k : k + 4])
    first.insert(20, first[0])  # a replayed copy of the opening datagram among them
    steps = [earlier[4], (4, 0), earlier[5], (5, 0), first, (3, 1), rest]
    inboxes, slow = [], []
    for fast in (False, True):
        inbox = Inbox.build(plan, KEY, 7, peers={3, 4, 5}, codec=c, receive_buffers=1)
        taken = 0
        for step in steps:
            if isinstance(step, tuple):  # the agent merges that round and gives it back
                r, got = inbox.rounds.borrow(step[0], wire.MsgType.PARAMS, step[1])
                assert r is not None and got == (n if step[1] == 0 else half)
                inbox.rounds.give_back(r)
            else:
                taken += _feed(inbox, step, fast)
        inboxes.append(inbox)
        slow.append(taken)
    a, b = inboxes
    assert a.counter.snapshot() == b.counter.snapshot()
    drops = a.counter.drops
    # 4's round 1 finds the buffer 3 gave back and opens in the middle: only its first half
    # was refused; 5's, all of it
    assert drops == {"no_buffer": half + n, "collected": n - half, "replayed": 1}
    assert _links(a) == _links(b)
    for link in b.links.values():
        arrived, expected = link.loss()
        assert arrived == expected > 0  # every datagram arrived: none counts as lost
    _same_rounds(a, b)
    total = sum(len(x) for x in steps if not isinstance(x, tuple))
    assert slow[0] == total
    # the fast inbox's ingest() took what opens a round or a refusal, the replayed copy, and
    # what follows a run that a batch's end cut
    assert slow[1] <= 16, slow


@pytest.mark.parametrize(
    "scale, accepted",
    [
        (1e36, True),  # 128 * 1e36 is finite: every q * scale is, decoded in place
        (3e38, False),  # finite, but 127 * 3e38 is not: the chunk would hold Inf
        (-3e38, False),
        (np.inf, False),
    ],
)
def test_an_int8_scale_whose_products_overflow_is_dropped_by_both_paths(scale, accepted):
    plan = _plan("int8")
    enc = Encoder(plan, KEY, fleet=7, sender=3, codec=payload.codec("int8"))
    x = np.random.default_rng(5).standard_normal(PLAN.n_params, dtype=np.float32)
    stream = [bytearray(d) for d in enc.chunks(x, wire.MsgType.PARAMS, 0)]
    forged = stream[2]  # mid-round, where the fast path would take it
    at = 3 + wire.HEADER_SIZE  # the group's framing, then the header: the scale leads
    forged[at : at + 4] = np.array([scale], "<f4").tobytes()
    forged[at + 4 : at + 8] = bytes([127, 0x81, 128, 1])  # q = 127, -127, -128, 1
    forged[3:] = reseal(forged[3:], KEY)
    stream = [bytes(d) for d in stream]
    a, _ = _run(stream, False, "int8")
    b, slow = _run(stream, True, "int8")
    assert a.counter.snapshot() == b.counter.snapshot()
    assert a.counter.drops.get("non_finite", 0) == (0 if accepted else 1)
    assert slow == (1 if accepted else 2)  # the round's opening, and the refused one
    ra, rb = (i.rounds.slots[(3, wire.MsgType.PARAMS)].current for i in (a, b))
    np.testing.assert_array_equal(ra.mask, rb.mask)
    np.testing.assert_array_equal(ra.buf.view(np.uint32), rb.buf.view(np.uint32))
    assert bool(ra.mask[2]) == accepted


@pytest.mark.parametrize("codec", ["float32", "int8"])
def test_one_fast_call_takes_a_senders_share_of_a_batch_past_other_senders(codec):
    """Paced senders' bursts interleave in a receive batch. The compiled path takes a sender's
    rows past the other senders' (each link in its own order), so a batch costs one call per
    sender, not one per burst, and the inbox ends as one fed datagram by datagram."""
    plan, c = _plan(codec), payload.codec(codec)
    rng = np.random.default_rng(9)
    encs = {s: Encoder(plan, KEY, fleet=7, sender=s, codec=c) for s in (3, 4, 5)}
    rounds = {
        s: [bytes(d) for d in encs[s].chunks(rng.standard_normal(PLAN.n_params, np.float32), 1, 0)]
        for s in encs
    }
    openings = [rounds[s][0] for s in encs]
    batch = []  # bursts of 3 from each sender in turn, as paced senders' traffic arrives
    for k in range(1, plan.n_chunks, 3):
        for s in encs:
            batch.extend(rounds[s][k : k + 3])
    assert len(batch) <= 128
    replay = batch[4]  # a copy of a datagram already taken, among the last burst
    batch.append(replay)

    calls = []
    inboxes = []
    for fast in (False, True):
        inbox = Inbox.build(plan, KEY, 7, peers=set(encs), codec=c)
        _feed(inbox, openings, fast)

        def counted(*args, inbox=inbox):
            k = inbox.fast(*args)
            calls.append(k)
            return k

        t = UdpTransport()
        bufs = np.zeros((128, RECV_BUFFER), np.uint8)
        lengths = np.zeros(128, np.intp)
        for i, d in enumerate(batch):
            bufs[i, : len(d)] = np.frombuffer(d, np.uint8)
            lengths[i] = len(d)
        views = [memoryview(bufs[i]) for i in range(128)]
        handler = inbox.ingest
        t.deliver(
            bufs, views, lengths, len(batch), handler, inbox.counter.drop, counted if fast else None
        )
        t.close()
        inboxes.append(inbox)
    a, b = inboxes
    # a call per sender takes its whole share; the replayed copy is refused by one more call
    # and goes to ingest(), which drops it
    assert [k for k in calls if k] == [len(batch) // 3] * 3
    assert b.counter.drops == {"replayed": 1} == a.counter.drops
    assert a.counter.snapshot() == b.counter.snapshot()
    assert _links(a) == _links(b)
    _same_rounds(a, b)
