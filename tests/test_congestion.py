"""The rate controller (dataplane/congestion): fed event sequences, no sockets, then the reports
on a real loopback link between two data planes."""

import numpy as np
import pytest
from helpers.ports import free_port
from helpers.waiting import until

from edgegossip.dataplane import congestion, wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.congestion import FEEDBACK_S, Report, aimd
from edgegossip.dataplane.congestion.signal import CURRENT_FILTER, TARGET_S, Sends
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.keys import LinkKeys
from edgegossip.dataplane.outbox import Encoder
from edgegossip.dataplane.plane import DataPlane, PlaneSpec
from edgegossip.dataplane.sender import Snapshots
from edgegossip.transport.peers import PeerBook

CAP = 1e6  # bytes a second
FRAME = 1000  # bytes a datagram, for the fluid channel below


def test_a_sends_time_is_read_between_the_ends_of_its_run():
    s = Sends()
    s.add(10, 20, 1.0, 2.0)
    s.add(21, 21, 3.0, 3.0)
    assert s.at(10) == 1.0 and s.at(15) == pytest.approx(1.5) and s.at(21) == 3.0
    assert s.at(9) is None and s.at(22) is None


class Channel:
    """A shared channel as a fluid: `capacity` bytes a second, a drop-tail queue of `queue_s` at
    that rate, and random loss on top. Each sender sends at its controller's rate toward one
    receiver, which reports every FEEDBACK_S; its clock is `offset` ahead of the sender's."""

    def __init__(self, controllers, capacity, queue_s=0.5, loss=0.0, offset=5.0, seed=0):
        self.ctls, self.capacity = controllers, capacity
        self.limit = capacity * queue_s
        self.loss, self.offset = loss, offset
        self.rng = np.random.default_rng(seed)
        self.queue = 0.0
        self.seq = [0] * len(controllers)
        self.arrived = [0] * len(controllers)
        self.delays: list[float] = []
        self.dropped = 0.0

    def tick(self, now, dt=FEEDBACK_S):
        rates = [c.rate(1) for c in self.ctls]
        offered = sum(rates) * dt
        room = self.limit - self.queue + self.capacity * dt
        kept = min(1.0, room / offered) if offered else 1.0
        self.dropped += offered * (1 - kept)
        self.queue = max(0.0, min(self.limit, self.queue + offered - self.capacity * dt))
        delay = self.queue / self.capacity
        self.delays.append(delay)
        for i, c in enumerate(self.ctls):
            n = int(rates[i] * dt / FRAME)
            first = self.seq[i] + 1
            self.seq[i] += n
            c.sent(1, first, self.seq[i], now, now + dt)
            got = self.rng.binomial(n, kept * (1 - self.loss)) if n else 0
            self.arrived[i] += got
            at = now + dt + delay + self.offset
            c.report(1, Report(1, self.seq[i], 1, self.arrived[i], at), now=now + dt)

    def run(self, seconds, dt=FEEDBACK_S):
        for k in range(int(seconds / dt)):
            self.tick(k * dt, dt)
        return self


def _controllers(name, n, cap=CAP):
    out = [congestion.make(name, cap) for _ in range(n)]
    for c in out:
        c.session = 1
    return out


def test_random_loss_at_a_steady_delay_does_not_slow_a_link():
    (c,) = _controllers("aimd", 1)
    Channel([c], capacity=10 * CAP, loss=0.2).run(30)
    assert c.rate(1) == CAP  # at the cap, 20% loss notwithstanding
    assert c.metrics()["congested_intervals"] == 0


def _learn(c, seq=0, arrived=0, t=0.0, n=20, delay=0.0):
    """n intervals of 100 datagrams at 10% loss (the link's random loss), delay on top of a
    1 s offset; returns where the link stands."""
    for _ in range(n):
        c.sent(1, seq + 1, seq + 100, t, t + 0.2)
        seq, arrived, t = seq + 100, arrived + 90, t + 0.2
        c.report(1, Report(1, seq, 1, arrived, t + 1.0 + delay), now=t)
    return seq, arrived, t


def test_a_receiver_held_back_now_and_then_is_no_queue_to_back_off_from():
    """Reports late every other time (a receive thread behind training on a small board's
    CPU) at the link's random loss: the pace still grows, to the cap."""
    (c,) = _controllers("aimd", 1)
    seq, arrived, t = _learn(c)
    for k in range(100):
        c.sent(1, seq + 1, seq + 100, t, t + 0.2)
        seq, arrived, t = seq + 100, arrived + 90, t + 0.2
        c.report(1, Report(1, seq, 1, arrived, t + 1.0 + 0.25 * (k % 2)), now=t)
    assert c.rate(1) == CAP and c.metrics()["congested_intervals"] == 0


def test_a_queue_that_stays_backs_off_once_within_its_drain():
    (c,) = _controllers("aimd", 1)
    seq, arrived, t = _learn(c)
    rates = []
    for _ in range(CURRENT_FILTER + 1):  # every report 2 targets late, at the random loss
        c.sent(1, seq + 1, seq + 100, t, t + 0.2)
        seq, arrived, t = seq + 100, arrived + 90, t + 0.2
        c.report(1, Report(1, seq, 1, arrived, t + 1.0 + 2 * TARGET_S), now=t)
        rates.append(c.rate(1))
    grown = rates[CURRENT_FILTER - 2]  # still growing until the filter is full of the queue
    assert rates[CURRENT_FILTER - 1] == pytest.approx(grown * aimd.BETA)
    assert rates[CURRENT_FILTER] == rates[CURRENT_FILTER - 1]  # held: the same queue


def test_loss_beyond_the_links_random_loss_is_congestion_at_any_delay():
    (c,) = _controllers("aimd", 1)
    seq, arrived, t = _learn(c)  # 10% loss, steady delay: the link's random loss
    assert c.metrics()["congested_intervals"] == 0
    rate = c.rate(1)
    for k in range(2):  # 60% lost, twice running: once may be chance, twice is a full queue
        c.sent(1, seq + 1, seq + 100, t, t + 0.2)
        seq, arrived, t = seq + 100, arrived + 40, t + 0.2
        c.report(1, Report(1, seq, 1, arrived, t + 1.0), now=t)
        if k == 0:
            assert c.rate(1) > rate  # not yet
            rate = c.rate(1)
    assert c.rate(1) == pytest.approx(rate * aimd.BETA)


def test_reports_of_another_session_or_older_ones_move_nothing():
    (c,) = _controllers("aimd", 1)
    c.sent(1, 1, 100, 0.0, 0.2)
    assert c.report(1, Report(2, 100, 1, 100, 5.0), now=0.3) is None
    assert c.report(1, Report(1, 100, 1, 100, 5.0), now=0.3) is not None
    assert c.report(1, Report(1, 90, 1, 90, 5.0), now=0.4) is None  # reordered
    assert c.report(1, Report(1, 500, 1, 500, 5.0), now=0.5) is None  # never sent


@pytest.mark.parametrize("stations", [2, 8])
def test_stations_sharing_a_channel_fill_it_without_a_standing_queue(stations):
    """The channel carries a quarter of what the stations' caps would offer together: fixed
    paces keep its queue full and lose most of what they send; AIMD shares it, equally, and
    drops next to nothing."""
    capacity = stations * CAP / 4
    fixed = Channel(_controllers("fixed", stations), capacity, loss=0.05).run(60)
    assert np.mean(fixed.delays[-100:]) > 0.4  # the whole queue
    assert fixed.dropped > 0.5 * stations * CAP * 60
    ctls = _controllers("aimd", stations)
    ch = Channel(ctls, capacity, loss=0.05).run(120)
    assert ch.dropped < 0.02 * capacity * 120
    rates = [c.rate(1) for c in ctls]
    assert sum(rates) == pytest.approx(capacity, rel=0.35)
    assert max(rates) < 1.6 * min(rates)  # equal shares, within AIMD's sawtooth


def test_unpaced_links_stay_unpaced():
    (c,) = _controllers("aimd", 1, cap=None)
    assert c.rate(1) is None and c.device_rate() is None


def test_an_unknown_controller_is_one_line():
    with pytest.raises(ValueError, match="congestion must be one of aimd, fixed"):
        congestion.make("bbr", CAP)


# -- the wire --------------------------------------------------------------------------------

KEY = b"k" * 32
PLAN = ChunkPlan(20_000, 1_000)


def test_a_report_crosses_the_wire_whole_and_a_wrong_sized_one_is_dropped():
    enc = Encoder(PLAN, KEY, 1, sender=2)
    inbox = Inbox.build(PLAN, KEY, 1, me=0, messages=frozenset({wire.MsgType.PARAMS}))
    got = []
    inbox.on_feedback = lambda peer, r: got.append((peer, r))
    sent = Report(7, 123456, 3, 120000, 1234.5)
    inbox.ingest(memoryview(bytes(enc.feedback(sent, receiver=0))[3:]))
    assert got == [(2, sent)]
    short = enc._frame(wire.MsgType.FEEDBACK, 0, 0, 0, 0, memoryview(b"\0" * 8), 0)
    inbox.ingest(memoryview(bytes(short)[3:]))
    assert inbox.counter.drops["bad_feedback"] == 1 and len(got) == 1


def test_a_receiver_reports_a_link_once_an_interval_while_chunks_arrive():
    enc = Encoder(PLAN, KEY, 1, sender=2)
    inbox = Inbox.build(PLAN, KEY, 1, me=0)
    reports = []
    inbox.on_report = lambda peer, r: reports.append((peer, r))
    x = np.ones(PLAN.n_params, np.float32)
    for d in enc.chunks(x, wire.MsgType.PARAMS, 0):
        inbox.ingest(memoryview(bytes(d)[3:]))
    assert len(reports) == 1  # all within one FEEDBACK_S
    peer, r = reports[0]
    assert peer == 2 and r.session == enc.session and r.first == 1 and r.highest == 1


def test_a_paced_round_leaves_in_slices_and_its_receiver_reports_back():
    """Two data planes on loopback: a round to a peer at a pace of 40 slices a second leaves in
    slices whose sequence numbers the controller hears of, and the receiver's reports come back
    and are measured."""
    n = 200_000
    plan = ChunkPlan(n, 1400)
    rate = 2.5e6  # bytes a second: the round takes ~0.3 s, slices of ~0.2 s
    keys = LinkKeys.of(KEY)
    ports = [free_port(), free_port()]
    specs = [
        PlaneSpec("udp", ("127.0.0.1", ports[i]), 1, i, rate_bytes_per_s=rate, congestion="fixed")
        for i in range(2)
    ]
    books = [PeerBook({1 - i: ("127.0.0.1", ports[1 - i])}) for i in range(2)]
    with (
        DataPlane(specs[0], plan, keys, peers=books[0]) as a,
        DataPlane(specs[1], plan, keys, peers=books[1]) as b,
    ):
        snaps = Snapshots(n, 1)
        snap = snaps.take(np.ones(n, np.float32))
        assert a.sender is not None and b.sender is not None
        control = a.sender.controller
        a.sender.send(1, snap, wire.MsgType.PARAMS, 1)
        snap.release()
        until(lambda: b.inbox.counter.accepted >= plan.n_chunks, 30, "the round")
        signal = control._links[1].signal
        until(lambda: signal.last is not None, 30, "a report from the receiver")
        runs = [r for r in signal.sends._runs if r[1] > r[0]]  # the round's, not reports
        assert len(runs) >= 2  # sliced
        assert runs[0][0] == 1 and runs[-1][1] == plan.n_chunks
        assert all(r[0] == q[1] + 1 for q, r in zip(runs, runs[1:]))  # contiguous
        assert signal.last.session == a.encoder.session and 1 <= signal.last.highest
        assert signal.queue_delay_s < 1.0  # measured, on an idle loopback link
        assert a.inbox.counter.drops.get("bad_feedback", 0) == 0
