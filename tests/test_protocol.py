"""Protocols against a recording transport: who is sent what."""

import threading
import time

import numpy as np
import pytest

from edgegossip.algorithms import gossip_push
from edgegossip.config import AgentConfig, Peer
from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder
from edgegossip.dataplane.reassembly import Event
from edgegossip.dataplane.sender import Sender, Snapshots
from edgegossip.protocol import Context, make_protocol
from edgegossip.protocol.gossip_push import CREDITS, LEND_SHARE
from edgegossip.transport.base import Transport
from edgegossip.transport.peers import PeerBook

KEY = b"k" * 32


class SlowRecorder(Transport):
    """Takes 1 ms per datagram, as a slow link would, and records (peer, msg_type, block)."""

    name = "recorder"

    def __init__(self):
        self.sent = []
        self.lock = threading.Lock()

    def bind(self, endpoint):
        return endpoint

    def send(self, peer, datagram):
        time.sleep(0.001)
        h = wire.unpack(bytes(datagram)[3:])
        with self.lock:
            self.sent.append((peer, h.msg_type, h.block))

    def recv_loop(self, handler, drop, stop, fast=None):
        stop.wait()

    def close(self):
        pass


def test_rps_iteration_reaches_every_peer():
    W = 8
    cfg = AgentConfig(
        id=0,
        listen="127.0.0.1:1",
        workers=W,
        algorithm="rps",
        model="logreg",
        rps_period=1,
        peers=tuple(Peer(i, "127.0.0.1", 1000 + i) for i in range(1, W)),
    )
    plan = ChunkPlan(7850, wire.default_chunk_bytes())
    t = SlowRecorder()
    endpoints = PeerBook({p.id: (p.host, p.port) for p in cfg.peers})
    sender = Sender(t, Encoder(plan, KEY, 1, 0), endpoints)
    inbox = Inbox.build(plan, KEY, 1, rps_blocks=W)
    snapshots = Snapshots(plan.n_params, 2)
    ctx = Context(cfg, plan, inbox.rounds, sender, endpoints, np.random.default_rng(0), snapshots)
    proto = make_protocol(ctx)
    proto.after_step(np.ones(plan.n_params, np.float32), 1)
    deadline = time.monotonic() + 10
    while sender.busy and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    sender.close()
    peers = {(p.host, p.port) for p in cfg.peers}
    reduce_to = {p for p, m, _ in t.sent if m == wire.MsgType.REDUCE}
    gather_to = {p for p, m, _ in t.sent if m == wire.MsgType.GATHER}
    assert reduce_to == peers and gather_to == peers, (len(reduce_to), len(gather_to))
    assert snapshots.skipped == 0


def test_a_snapshot_returns_to_the_pool_only_when_every_holder_is_done():
    pool = Snapshots(10, 2)
    x = np.arange(10, dtype=np.float32)
    a = pool.take(x)
    a.hold()  # the send thread's hold
    b = pool.take(x + 1)
    assert pool.take(x) is None and pool.skipped == 1
    a.release()  # the protocol is done; the sender still reads a.vec
    assert pool.take(x) is None
    a.release()  # the sender is done
    c = pool.take(x * 0)
    assert c is a and (c.vec == 0).all() and (b.vec == x + 1).all()


def _elastic_gossip(p: float, deadline_s: float, receive_buffers: int = 2):
    """Worker 0 of three running Elastic Gossip over a slow recording link: (its config, the
    chunk plan, its inbox, its sender, the protocol's context)."""
    cfg = AgentConfig(
        id=0,
        listen="127.0.0.1:1",
        workers=3,
        algorithm="elastic-gossip",
        model="logreg",
        p=p,
        deadline_s=deadline_s,
        peers=(Peer(1, "127.0.0.1", 1001), Peer(2, "127.0.0.1", 1002)),
    )
    plan = ChunkPlan(7850, wire.default_chunk_bytes())
    inbox = Inbox.build(plan, KEY, 1, receive_buffers=receive_buffers, stale_s=600)
    endpoints = PeerBook({p.id: (p.host, p.port) for p in cfg.peers})
    sender = Sender(SlowRecorder(), Encoder(plan, KEY, 1, 0), endpoints)
    rng = np.random.default_rng(0)
    ctx = Context(cfg, plan, inbox.rounds, sender, endpoints, rng, Snapshots(plan.n_params, 2))
    return cfg, plan, inbox, sender, ctx


def test_a_draw_is_never_thrown_away():
    """p = 1 with a slow sender: every step draws, the draws made while the link is busy are
    owed and start as soon as it frees, and beyond MAX_OWED they lapse, counted."""
    from edgegossip.protocol.gossip import MAX_OWED

    cfg, plan, _, sender, ctx = _elastic_gossip(p=1.0, deadline_s=0.2)
    proto = make_protocol(ctx)
    x = np.ones(plan.n_params, np.float32)
    steps = 0
    for steps in range(1, 41):  # quick steps: the link cannot keep up with p = 1
        proto.before_step(x, steps)
        proto.after_step(x, steps)
        time.sleep(0.005)
    ex = ctx.exchanges
    assert ex["drawn"] == 40
    assert ex["drawn"] == ex["initiated"] + proto.owed + ex["lapsed"]  # every draw accounted
    assert proto.owed <= MAX_OWED and ex["lapsed"] > 0 and ex["initiated"] >= 2
    started = ex["initiated"]
    from dataclasses import replace

    ctx.cfg = replace(cfg, p=0.0)  # no new draws: the owed ones start as the link frees
    end = time.monotonic() + 10
    while proto.owed and time.monotonic() < end:
        steps += 1
        proto.before_step(x, steps)
        proto.after_step(x, steps)
        time.sleep(0.02)
    assert proto.owed == 0 and ex["initiated"] > started
    sender.close()


def test_a_round_no_exchange_will_collect_gives_its_buffer_back_at_once():
    """One shared receive buffer. A PARAMS round from a peer we have no exchange with, and
    that asks for none (a late answer to an exchange that timed out), is not kept until the
    inbox's stale_s: the next step gives its buffer back, so the next peer's exchange finds
    it, and the rest of the late round is dropped as collected."""
    _, plan, inbox, sender, ctx = _elastic_gossip(p=0.0, deadline_s=5.0, receive_buffers=1)
    proto = make_protocol(ctx)
    x = np.ones(plan.n_params, np.float32)
    late = [
        bytes(d)[3:] for d in Encoder(plan, KEY, 1, 1).chunks(x, wire.MsgType.PARAMS, 7, receiver=0)
    ]
    for d in late[:-1]:
        inbox.ingest(memoryview(d))
    assert inbox.rounds.pool.free == [] and inbox.rounds.pool.made == 1
    proto.before_step(x, 1)
    assert len(inbox.rounds.pool.free) == 1  # given back, not held for stale_s
    inbox.ingest(memoryview(late[-1]))
    assert inbox.counter.drops["collected"] == 1
    asks = Encoder(plan, KEY, 1, 2).chunks(x, wire.MsgType.PARAMS, 1, flags=wire.FLAG_REPLY)
    for d in asks:
        inbox.ingest(memoryview(bytes(d)[3:]))
    assert "no_buffer" not in inbox.counter.drops
    proto.before_step(x, 2)
    assert 2 in proto.pending  # answered: the exchange goes ahead with the buffer
    assert inbox.rounds.pool.made == 1
    sender.close()


class Direct(Transport):
    """Hands every datagram straight to one inbox, as a lossless link would."""

    name = "direct"

    def __init__(self, inbox):
        self.inbox = inbox

    def bind(self, endpoint):
        return endpoint

    def send(self, peer, datagram):
        self.inbox.ingest(memoryview(bytes(datagram))[1 + len(wire.DEFAULT_GROUP) :])

    def recv_loop(self, handler, drop, stop, fast=None):
        stop.wait()

    def close(self):
        pass


def _push_receiver(me: int = 0, p: float = 0.0, bound: str = "clip"):
    """Worker `me` of a 3-worker gossip-push fleet (it only receives at p = 0):
    (plan, cfg, inbox, protocol)."""
    plan = ChunkPlan(7850, wire.default_chunk_bytes())
    cfg = AgentConfig(
        id=me,
        listen="127.0.0.1:1",
        workers=3,
        algorithm="gossip-push",
        model="logreg",
        p=p,
        peers=tuple(Peer(j, "127.0.0.1", 1000 + j) for j in range(3) if j != me),
        bound=bound,
    )
    inbox = Inbox.build(plan, KEY, 1, me=me)
    book = PeerBook({p.id: (p.host, p.port) for p in cfg.peers})
    receiver = make_protocol(Context(cfg, plan, inbox.rounds, None, book, np.random.default_rng(0)))
    return plan, cfg, inbox, receiver


def test_gossip_push_agents_merge_by_push_sum_weights_over_the_wire():
    """Two workers (values 4 and 8) push to a third (0): the weights travel in the headers and
    the receiver ends at the weighted mean 3 with weight 2, the senders at weight 1/2 each
    (the merge bound off: peer 2's 8 is six times the model's distance from 0 after the first
    merge, which the bound clips: test_bound.py)."""
    plan, cfg, inbox, receiver = _push_receiver(bound="none")
    pushers = []
    for me, value in ((1, 4.0), (2, 8.0)):
        c = AgentConfig(
            id=me,
            listen="127.0.0.1:1",
            workers=3,
            algorithm="gossip-push",
            model="logreg",
            p=1.0,
            peers=(Peer(0, "127.0.0.1", 1000),),
        )
        book_c = PeerBook({0: ("127.0.0.1", 1000)})
        sender = Sender(Direct(inbox), Encoder(plan, KEY, 1, me), book_c)
        ctx = Context(
            c,
            plan,
            Inbox.build(plan, KEY, 1, me=me).rounds,
            sender,
            book_c,
            np.random.default_rng(me),
            Snapshots(plan.n_params, 2),
        )
        proto = make_protocol(ctx)
        proto.credit[0] = CREDITS  # as a round heard from 0 gives: weight goes only there
        proto.before_step(np.full(plan.n_params, value, np.float32), 0)
        pushers.append((ctx, sender))
    for ctx, sender in pushers:
        end = time.monotonic() + 10
        while sender.busy and time.monotonic() < end:
            time.sleep(0.01)
        sender.close()
        assert ctx.push_weight == 0.5 and ctx.exchanges["initiated"] == 1
    x = np.zeros(plan.n_params, np.float32)
    receiver.before_step(x, 0)  # learns of both messages and their weights
    receiver.after_step(x, 1)  # both complete: merged
    assert not receiver.pending
    np.testing.assert_allclose(x, 3.0, rtol=1e-6)
    assert receiver.ctx.push_weight == 2.0
    assert receiver.ctx.exchanges["completed"] == 2


def test_a_protocol_checkpoints_its_own_fields():
    """Push-sum's weight is the push protocol's to save and take back; the others keep none,
    so a checkpoint holds only what the algorithm that wrote it needs."""
    plan = ChunkPlan(7850, wire.default_chunk_bytes())

    def proto(algorithm):
        cfg = AgentConfig(
            id=0,
            listen="127.0.0.1:1",
            workers=2,
            algorithm=algorithm,
            model="logreg",
            peers=(Peer(1, "127.0.0.1", 1001),),
        )
        book = PeerBook({1: ("127.0.0.1", 1001)})
        return make_protocol(
            Context(
                cfg,
                plan,
                Inbox.build(plan, KEY, 1, me=0).rounds,
                None,
                book,
                np.random.default_rng(0),
            )
        )

    push = proto("gossip-push")
    push.ctx.push_weight = 0.375
    push.seen = {1: (7, 1234)}  # the last running sum seen from peer 1, in its session 7
    saved = push.checkpoint()
    assert (
        set(saved) == {"push_weight", "push_seen", "push_lent"}
        and float(saved["push_weight"]) == 0.375
    )
    again = proto("gossip-push")
    again.restore(saved)
    assert again.ctx.push_weight == 0.375 and again.seen == {1: (7, 1234)}
    again.restore({})  # a fresh start keeps the initial weight
    assert again.ctx.push_weight == 0.375
    assert proto("elastic-gossip").checkpoint() == {}


def test_a_push_weight_no_honest_peer_could_send_is_refused():
    """Four whole rounds from one key holder, each claiming the weight 65504 (a legal float16),
    once grew the receiver's weight past what float16 carries: its next push raised and the
    agent exited. Now such a receipt counts as nothing, and the receiver's weight stays within
    the fleet's total, so it pushes on."""
    plan, cfg, inbox, receiver = _push_receiver()
    hostile = Encoder(plan, KEY, 1, 1)
    x = np.zeros(plan.n_params, np.float32)
    for rnd in range(1, 5):
        # each round's sum 40,000 counts past the last: 4.9 weights of a 3-worker fleet
        y = np.full(plan.n_params, 100.0, np.float32)
        counts = rnd * 40000 % gossip_push.SUM_MOD
        for d in hostile.chunks(y, wire.MsgType.PARAMS, rnd, receiver=0, weight=counts):
            inbox.ingest(memoryview(bytes(d))[1 + len(wire.DEFAULT_GROUP) :])
        receiver.before_step(x, rnd)
        receiver.after_step(x, rnd + 1)
    assert receiver.ctx.push_weight <= cfg.workers
    assert receiver.weights_refused == 4 and receiver.metrics()["push_weights_refused"] == 4
    assert (x == 0).all()  # a refused weight merges nothing
    assert receiver._outgoing_weight(1) >= 0  # and it can still push


def _push_round(inbox, enc, rnd: int, counts: int, value: float, plan) -> None:
    y = np.full(plan.n_params, value, np.float32)
    for d in enc.chunks(y, wire.MsgType.PARAMS, rnd, receiver=0, weight=counts):
        inbox.ingest(memoryview(bytes(d))[1 + len(wire.DEFAULT_GROUP) :])


def test_a_lost_push_brings_its_weight_with_the_next_one():
    """Issue 47: running sums. Peer 1 gives 1/2, then 1/4; the first message is lost whole.
    The second carries the sum 3/4, so the receiver takes both: weight 1.75, and no weight
    drained with the lost message. A new session of the sender counts from 0 again."""
    plan, cfg, inbox, receiver = _push_receiver()
    u = gossip_push.unit(cfg.workers)
    enc = Encoder(plan, KEY, 1, 1, session=5)
    half, quarter = int(0.5 / u), int(0.25 / u)
    x = np.zeros(plan.n_params, np.float32)
    # round 1 (sum = half) never arrives; round 2 does
    _push_round(inbox, enc, 2, half + quarter, 8.0, plan)
    receiver.before_step(x, 0)
    receiver.after_step(x, 1)
    assert receiver.ctx.push_weight == pytest.approx(1.75)
    np.testing.assert_allclose(x, 8.0 * 0.75 / 1.75, rtol=1e-6)
    # the sender restarts: session 6, its sum counts from 0; a quarter arrives
    _push_round(inbox, Encoder(plan, KEY, 1, 1, session=6), 1, quarter, 8.0, plan)
    receiver.before_step(x, 2)
    receiver.after_step(x, 3)
    assert receiver.ctx.push_weight == pytest.approx(2.0) and receiver.weights_refused == 0


def test_a_peer_never_heard_gets_probes_not_weight():
    """Issue 47: a configured peer that never runs. Pushes to it carry the link's running sum
    unchanged, so the sender's weight does not drain toward a device that is off; a peer heard
    from gets half the weight."""
    _, _, _, proto = _push_receiver(me=1, p=1.0)
    assert proto._outgoing_weight(2) == 0 and proto.ctx.push_weight == 1.0
    assert proto.probes == 1
    now = time.monotonic()
    # a round from peer 0 (its running sum 0, nothing to take) gives credit toward it
    proto._on_params(Event(0, wire.MsgType.PARAMS, 1, 0, 0, 0, 9), None, None, now)
    assert [proto._choose([0, 2], now) for _ in range(3)] == [0, 0, 0]  # no probe due yet
    counts = proto._outgoing_weight(0)
    assert counts * gossip_push.unit(3) == pytest.approx(0.5) and proto.ctx.push_weight == 0.5
    # peer 0 holds LEND_SHARE of ours and gave nothing back: no more weight goes to it
    assert proto.lent[0] == pytest.approx(LEND_SHARE)
    assert proto._outgoing_weight(0) == proto.sums[0] and proto.probes == 2
    assert proto.ctx.push_weight == 0.5


def test_a_peer_that_never_gives_weight_back_holds_at_most_its_share():
    """Issues 54 and 67, item 2: a peer holding its own link's key sends valid rounds with its
    running sum never moving, and never stops. Every round heard earned it two pushes of half
    the weight (both honest weights fell to 1 count in 23 s); then it held LEND_SHARE until it
    went silent, which one that keeps answering never does. Now it holds at most LEND_SHARE at
    any moment, and what it holds comes back after DRY_ROUNDS rounds that brought none, while
    it still answers."""
    _, _, _, proto = _push_receiver(me=1, p=1.0)
    now = time.monotonic()
    for rnd in range(1, 50):  # the hostile peer: rounds, its sum never moving
        proto._on_params(Event(0, wire.MsgType.PARAMS, rnd, 0, 0, 0, 9), None, None, now)
        proto.pending.clear()
        proto._outgoing_weight(0)
        assert proto.lent[0] <= LEND_SHARE + 1e-9
        assert proto.ctx.push_weight >= 1 - LEND_SHARE - 1e-9
    assert proto.reclaimed >= 10 * LEND_SHARE  # taken back every few rounds, never silent
    assert 0 not in proto.liveness.silent


def test_a_running_sum_that_moves_without_weight_earns_no_room():
    """Issue 67, item 2: the peer says it gave 3/4 (its running sum moves) when it was lent
    nothing. That weight is ours to merge (capped at W), but it earns the peer no room beyond
    LEND_SHARE: what it may hold of ours stays bounded whatever its sums say."""
    _, cfg, _, proto = _push_receiver(me=1, p=1.0)
    u = gossip_push.unit(cfg.workers)
    now = time.monotonic()
    counts = int(0.75 / u)
    proto._on_params(Event(0, wire.MsgType.PARAMS, 1, 0, 0, counts, 9), None, None, now)
    assert proto.lent[0] == 0  # not -0.75: no credit to draw on
    proto._outgoing_weight(0)  # one push with weight: as much as it may hold
    assert proto.lent[0] == pytest.approx(LEND_SHARE, abs=u)
    assert proto._room(0) == 0  # no second push with weight until it gives some back


def test_liveness_marks_a_quiet_peer_silent_and_raises_the_alarms():
    from edgegossip.protocol.liveness import Liveness

    live = Liveness([1, 2], workers=3, p=0.5, deadline_s=lambda j: 0.5)
    live.step(0.0)
    live.step(0.1)  # a step time of 0.1 s: peers' rounds expected every 0.4 s
    for k in range(3):
        live.heard(1, 0.1 + 0.4 * k)  # gaps of 0.4 s
    assert live.silent_after(1) == pytest.approx(6 * 0.4)
    live.check(1.0, set())
    assert live.metrics() == {"silent_peers": [], "alarms": []}
    live.check(2.6, set())  # peer 2 never heard in 2.6 s; peer 1 quiet for 1.7 s
    assert live.metrics()["silent_peers"] == [2] and live.is_live(1, 2.6)
    assert not live.is_live(2, 2.6)
    for k in range(7, 23):
        live.heard(1, 0.1 + 0.4 * k)  # still every 0.4 s, up to 8.9 s
    live.check(9.0, {"weight_below_floor"})  # nothing merged since the start, peer 1 heard
    assert live.metrics()["alarms"] == ["merges_stopped", "weight_below_floor"]
    live.merged(9.1)
    live.heard(2, 9.1)
    live.check(9.2, set())
    assert live.metrics() == {"silent_peers": [], "alarms": []}
