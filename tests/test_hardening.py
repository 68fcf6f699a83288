"""The five attacks on the data plane, each sent over real sockets to a real receive path
(transport, receive thread, inbox with its compiled fast path) on both transports; after each,
the legitimate peer's next round is accepted whole. And a bounded fuzz of captured datagrams."""

import time

import numpy as np
import pytest

from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder
from edgegossip.transport import ReceiveThread, make_transport

KEY = b"k" * 32
PLAN = ChunkPlan(20_000, wire.default_chunk_bytes())  # 57 datagrams a model
A, B, C = 0, 1, 2  # B is the receiver under attack; A and C are its peers


def _frames(enc: Encoder, round: int, receiver: int, value: float = 1.0) -> list[bytes]:
    x = np.full(PLAN.n_params, value, np.float32)
    return [bytes(d) for d in enc.chunks(x, wire.MsgType.PARAMS, round, receiver=receiver)]


class Receiver:
    """B: a bound transport with its receive thread and inbox, and a socket to send it things."""

    def __init__(self, kind: str, port: int, inbox: Inbox):
        self.kind = kind
        self.inbox = inbox
        self.t = make_transport(kind)
        self.t.bind(("127.0.0.1", port))
        self.endpoint = ("127.0.0.1", port)
        self.rt = ReceiveThread(self.t, inbox.ingest, inbox.counter.drop, inbox.fast).start()
        self.out = make_transport(kind, rate_bytes_per_s=50e6)
        time.sleep(0.2 if kind == "zmq" else 0.0)

    def send(self, datagrams: list[bytes], timeout: float = 5.0) -> None:
        """Send and wait until the inbox has accounted for every one (accepted or dropped)."""
        c = self.inbox.counter
        target = c.accepted + c.dropped + len(datagrams)
        for d in datagrams:
            self.out.send(self.endpoint, memoryview(d))
        deadline = time.monotonic() + timeout
        while c.accepted + c.dropped < target and time.monotonic() < deadline:
            time.sleep(0.01)

    def round_ok(self, sender: int, round: int) -> bool:
        out = np.zeros(PLAN.n_params, np.float32)
        mask = np.zeros(PLAN.n_chunks, np.uint8)
        got = self.inbox.rounds.collect(
            sender, wire.MsgType.PARAMS, round, time.monotonic() + 3, out, mask
        )
        return got == PLAN.n_chunks

    def close(self) -> None:
        self.rt.stop()
        self.t.close()
        self.out.close()


@pytest.fixture
def receivers(free_udp_port):
    opened = []

    def start(kind, inbox=None):
        r = Receiver(kind, free_udp_port(), inbox or Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B))
        opened.append(r)
        return r

    yield start
    for r in opened:
        r.close()


def _drops(r: Receiver) -> dict:
    return dict(r.inbox.counter.drops)


@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_replay_across_destinations_is_dropped(receivers, kind):
    b = receivers(kind)
    a, c = Encoder(PLAN, KEY, 1, A, session=1), Encoder(PLAN, KEY, 1, C, session=1)
    a_to_c = _frames(a, 1, C)  # captured on their way to C
    c_to_a = _frames(c, 1, A)
    b.send(a_to_c + c_to_a)
    assert b.inbox.counter.accepted == 0
    assert _drops(b) == {"wrong_receiver": len(a_to_c) + len(c_to_a)}
    b.send(_frames(a, 2, B))  # A's own traffic to B, right after
    assert b.round_ok(A, 2) and set(_drops(b)) == {"wrong_receiver"}


@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_replay_into_a_restarted_receiver_is_dropped(receivers, kind):
    first = receivers(kind)
    a = Encoder(PLAN, KEY, 1, A, session=1)
    captured = _frames(a, 1, B)
    first.send(captured)
    assert first.round_ok(A, 1)
    state = first.inbox.links.state()  # what the checkpoint keeps
    first.close()
    restarted = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B)
    restarted.links.restore(state)
    b = receivers(kind, restarted)
    b.send(captured)
    assert b.inbox.counter.accepted == 0
    assert sum(_drops(b).values()) == len(captured)
    assert set(_drops(b)) <= {"replayed", "stale"}
    b.send(_frames(a, 2, B))
    assert b.round_ok(A, 2)


@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_a_restarted_peer_is_heard_at_once_and_its_old_session_dropped(receivers, kind):
    b = receivers(kind)
    before = Encoder(PLAN, KEY, 1, A, session=4)
    old = _frames(before, 900, B)
    b.send(old)
    assert b.round_ok(A, 900)
    after = Encoder(PLAN, KEY, 1, A, session=5)  # A crashed and came back: round 1 again
    b.send(_frames(after, 1, B))
    assert b.round_ok(A, 1) and "old_round" not in _drops(b)
    b.send(old)  # the old session replayed
    assert _drops(b) == {"old_session": len(old)}
    b.send(_frames(after, 2, B))
    assert b.round_ok(A, 2)


@pytest.mark.parametrize("round", [2**31, 2**32 - 1])
@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_one_tagged_datagram_far_ahead_in_round_cannot_lock_a_link(receivers, kind, round):
    b = receivers(kind)
    a = Encoder(PLAN, KEY, 1, A, session=1)
    b.send(_frames(a, 1, B))
    assert b.round_ok(A, 1)
    b.send(_frames(a, round, B)[:1])
    assert _drops(b) == {"round_jump": 1}
    b.send(_frames(a, 2, B))
    assert b.round_ok(A, 2)


@pytest.mark.parametrize("seq", [2**63, 2**64 - 1])
@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_one_tagged_datagram_far_ahead_in_sequence_cannot_lock_a_link(receivers, kind, seq):
    b = receivers(kind)
    a = Encoder(PLAN, KEY, 1, A, session=1)
    b.send(_frames(a, 1, B))
    assert b.round_ok(A, 1)
    honest = a._seq[B]
    a._seq[B] = seq - 1
    poisoned = bytes(
        next(a.chunks(np.ones(PLAN.n_params, np.float32), wire.MsgType.PARAMS, 2, receiver=B))
    )
    a._seq[B] = honest
    b.send([poisoned])
    assert _drops(b) == {"seq_jump": 1} and b.inbox.counter.accepted == PLAN.n_chunks
    b.send(_frames(a, 2, B))
    assert b.round_ok(A, 2)


def test_fuzzed_captured_datagrams_are_never_accepted():
    """Mutations of real datagrams B has already accepted: none may be accepted again, on the
    Python path or the compiled one, and the slot B filled stays as it was."""
    rng = np.random.default_rng(7)
    a = Encoder(PLAN, KEY, 1, A, session=3)
    originals = _frames(a, 5, B, value=2.0)
    others = _frames(Encoder(PLAN, KEY, 1, C, session=1), 1, A)
    pool = originals + others
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B)
    for d in originals:
        inbox.ingest(memoryview(d)[3:])
    accepted = inbox.counter.accepted
    prefix = np.frombuffer(wire.frame_prefix(wire.DEFAULT_GROUP), np.uint8)
    n, width = 64, len(originals[0]) + 64
    rows, lengths = np.zeros((n, width), np.uint8), np.zeros(n, np.intp)
    taken = np.zeros(n, np.uint8)
    deadline = time.monotonic() + 4
    mutated = 0
    while time.monotonic() < deadline:
        for i in range(n):
            d = bytearray(pool[rng.integers(len(pool))])
            for _ in range(int(rng.integers(1, 4))):
                kind = rng.integers(4) if d else 3
                if kind == 0:
                    d[rng.integers(len(d))] ^= 1 << int(rng.integers(8))
                elif kind == 1:
                    d[rng.integers(len(d))] = int(rng.integers(256))
                elif kind == 2:
                    del d[int(rng.integers(len(d))) :]
                else:
                    d += bytes(rng.integers(0, 256, int(rng.integers(1, 32)), dtype=np.uint8))
            d = d[:width]
            rows[i, : len(d)] = np.frombuffer(bytes(d), np.uint8)
            lengths[i] = len(d)
        for i in range(n):  # as a batching transport delivers: the fast path, then ingest()
            k = inbox.fast(rows, lengths, i, n, prefix, taken)
            assert k == 0 and not taken.any(), "the compiled path accepted a mutated datagram"
            if lengths[i] > 3 and rows[i, 0] == 2 and bytes(rows[i, 1:3]) == b"eg":
                inbox.ingest(memoryview(rows[i, 3 : lengths[i]]))
        mutated += n
    assert mutated > 1000
    assert inbox.counter.accepted == accepted
    out = np.zeros(PLAN.n_params, np.float32)
    mask = np.zeros(PLAN.n_chunks, np.uint8)
    assert inbox.rounds.collect(A, wire.MsgType.PARAMS, 5, 0, out, mask) == PLAN.n_chunks
    assert (out == 2.0).all()


def test_a_new_session_cannot_start_far_ahead_in_sequence():
    """A key holder bumping the session does not get to place the new window anywhere."""
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B)
    for d in _frames(Encoder(PLAN, KEY, 1, A, session=1), 1, B):
        inbox.ingest(memoryview(d)[3:])
    bumped = Encoder(PLAN, KEY, 1, A, session=2)
    bumped._seq[B] = 2**62
    inbox.ingest(memoryview(_frames(bumped, 1, B)[0])[3:])
    assert inbox.counter.drops == {"seq_jump": 1}
    for d in _frames(Encoder(PLAN, KEY, 1, A, session=2), 1, B):  # the real restart
        inbox.ingest(memoryview(d)[3:])
    assert inbox.counter.accepted == 2 * PLAN.n_chunks


def test_a_datagram_dropped_before_a_restart_is_not_accepted_from_a_replay_after_it():
    """A's round arrives while C's holds the only buffer, and is dropped (no_buffer),
    authentic: the checkpoint's replay state covers it, so an outsider who captured it cannot
    have it accepted by the restarted receiver; A's next round is."""
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B, receive_buffers=1)
    a, c = Encoder(PLAN, KEY, 1, A, session=1), Encoder(PLAN, KEY, 1, C, session=1)

    def ingest(box, datagrams):
        for d in datagrams:
            box.ingest(memoryview(d)[3:])

    ingest(inbox, _frames(a, 1, B))  # accepted: the link has a session to persist
    inbox.rounds.give_back(inbox.rounds.borrow(A, wire.MsgType.PARAMS, 1)[0])
    ingest(inbox, _frames(c, 1, B))  # C's round takes the one buffer
    captured = _frames(a, 2, B)
    ingest(inbox, captured)
    assert inbox.counter.drops == {"no_buffer": PLAN.n_chunks}
    restarted = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B, receive_buffers=1)
    restarted.links.restore(inbox.links.state())
    ingest(restarted, captured)
    assert restarted.counter.accepted == 0
    assert set(restarted.counter.drops) <= {"replayed", "stale"}
    ingest(restarted, _frames(a, 3, B))
    assert restarted.counter.accepted == PLAN.n_chunks


def test_a_datagram_dropped_as_collected_is_refused_when_replayed():
    """An authentic datagram of a round the receiver already merged is dropped (collected) and
    recorded: its replay is refused as replayed, not filed, and the sender's next round is
    accepted whole."""
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B, receive_buffers=2)
    real = Encoder(PLAN, KEY, 1, A, session=1)
    first = _frames(real, 1, B)
    for d in first[:-1]:
        inbox.ingest(memoryview(d)[3:])
    inbox.rounds.give_back(inbox.rounds.borrow(A, wire.MsgType.PARAMS, 1)[0])  # merged
    inbox.ingest(memoryview(first[-1])[3:])
    assert inbox.counter.drops == {"collected": 1}
    inbox.ingest(memoryview(first[-1])[3:])
    assert inbox.counter.drops == {"collected": 1, "replayed": 1}
    for d in _frames(real, 2, B):
        inbox.ingest(memoryview(d)[3:])
    assert inbox.counter.accepted == 2 * PLAN.n_chunks - 1
    assert inbox.links.by_link() == {A: 0.0}


def test_a_dropped_datagram_of_the_session_before_does_not_end_a_restarted_peers_probation():
    """A restarts (session 2, on probation against session 1). A datagram of session 1 that
    arrived and was dropped as collected, replayed now, would have taken the link back to
    session 1 as if A still spoke there: it is refused, and A's new session stays."""
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B, receive_buffers=2)
    old = Encoder(PLAN, KEY, 1, A, session=1)
    for d in _frames(old, 1, B):
        inbox.ingest(memoryview(d)[3:])
    inbox.rounds.give_back(inbox.rounds.borrow(A, wire.MsgType.PARAMS, 1)[0])
    late = _frames(old, 1, B)  # the round again (a retransmitted answer): merged already
    for d in late:
        inbox.ingest(memoryview(d)[3:])
    assert inbox.counter.drops == {"collected": PLAN.n_chunks}
    new = Encoder(PLAN, KEY, 1, A, session=2)
    inbox.ingest(memoryview(_frames(new, 1, B)[0])[3:])
    assert inbox.links[A].session == 2 and inbox.links[A].prev is not None
    for d in late:
        inbox.ingest(memoryview(d)[3:])
    assert inbox.links[A].session == 2
    assert inbox.counter.drops == {"collected": PLAN.n_chunks, "replayed": PLAN.n_chunks}
    assert inbox.links.state().tolist() == [[A, 1, 2 * PLAN.n_chunks]]


def test_a_session_claimed_on_one_datagrams_word_does_not_lock_the_link():
    """Issue 21, item 12: one datagram with session + 65,536 (inside session_jump's bound, from
    a holder of the link's key) once made the receiver drop the real peer as old_session, and
    persisted the forged session across its own restarts. Now the new session is on probation:
    the real peer's next datagram in its own session takes the link back, and the checkpoint
    never holds the forged session."""
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B)
    real = Encoder(PLAN, KEY, 1, A, session=3)
    for d in _frames(real, 1, B):
        inbox.ingest(memoryview(d)[3:])
    forged = Encoder(PLAN, KEY, 1, A, session=3 + (1 << 16))
    inbox.ingest(memoryview(_frames(forged, 1, B)[0])[3:])
    assert inbox.links.state().tolist() == [[A, 3, PLAN.n_chunks]]  # not persisted
    for d in _frames(real, 2, B):
        inbox.ingest(memoryview(d)[3:])
    assert inbox.counter.drops == {}
    out = np.zeros(PLAN.n_params, np.float32)
    mask = np.zeros(PLAN.n_chunks, np.uint8)
    assert inbox.rounds.collect(A, wire.MsgType.PARAMS, 2, 0, out, mask) == PLAN.n_chunks
    assert int(inbox.links[A].session) == 3
    # a forger who claims again is undone again by the real peer's next round
    inbox.ingest(memoryview(_frames(forged, 2, B)[0])[3:])
    for d in _frames(real, 3, B):
        inbox.ingest(memoryview(d)[3:])
    assert inbox.rounds.collect(A, wire.MsgType.PARAMS, 3, 0, out, mask) == PLAN.n_chunks
    assert inbox.links.state().tolist() == [[A, 3, 3 * PLAN.n_chunks]]


def test_a_real_restart_is_confirmed_and_then_persisted():
    inbox = Inbox.build(PLAN, KEY, 1, peers={A, C}, me=B)
    for d in _frames(Encoder(PLAN, KEY, 1, A, session=3), 1, B):
        inbox.ingest(memoryview(d)[3:])
    for d in _frames(Encoder(PLAN, KEY, 1, A, session=4), 1, B):  # a whole round: confirmed
        inbox.ingest(memoryview(d)[3:])
    assert inbox.links.state().tolist() == [[A, 4, PLAN.n_chunks]]


def test_one_sender_holds_at_most_its_share_of_the_receive_buffers():
    """Issue 54, item 1: C, holding its own link's key, kept both pooled buffers of B with
    rounds nothing collects (REDUCE rounds to a gossip agent), and A's rounds were dropped as
    no_buffer for as long as C kept sending. Now a type the algorithm never collects is
    refused at the gate, and a sender holding both buffers gives one up to another sender's
    round; its own next rounds then take its own older buffer, never A's."""
    gossip = frozenset({wire.MsgType.PARAMS})
    inbox = Inbox.build(
        PLAN, KEY, 1, peers={A, C}, me=B, receive_buffers=2, stale_s=600, messages=gossip
    )
    a, c = Encoder(PLAN, KEY, 1, A, session=1), Encoder(PLAN, KEY, 1, C, session=1)

    def ingest(datagrams):
        for d in datagrams:
            inbox.ingest(memoryview(d)[3:])

    x = np.ones(PLAN.n_params, np.float32)
    ingest(bytes(d) for d in c.chunks(x, wire.MsgType.REDUCE, 1, receiver=B))
    assert inbox.counter.drops == {"unwanted_type": PLAN.n_chunks}
    ingest(_frames(c, 1, B))  # C's rounds, never collected, take both buffers
    ingest(_frames(c, 2, B))
    assert inbox.rounds.pool.made == 2 and not inbox.rounds.pool.free
    ingest(_frames(a, 1, B, value=5.0))  # A's round takes C's older one
    for rnd in range(3, 8):  # C's new rounds supersede its own, never A's
        ingest(_frames(c, rnd, B))
    assert "no_buffer" not in inbox.counter.drops
    out = np.zeros(PLAN.n_params, np.float32)
    mask = np.zeros(PLAN.n_chunks, np.uint8)
    assert inbox.rounds.collect(A, wire.MsgType.PARAMS, 1, 0, out, mask) == PLAN.n_chunks
    assert (out == 5.0).all()
