"""What Elastic Gossip and Gossiping SGD (pull, push) share between devices: rounds, pending
exchanges, deadlines, owed draws, no barrier. Each algorithm's own moves are a subclass in a
module of its own (elastic_gossip.py, gossip_pull.py, gossip_push.py).

Round numbers: every PARAMS a worker sends carries the next value of its own counter, so each
sender's stream of rounds only grows (the inbox drops older rounds). An exchange is matched by
peer, not by round.

Between snapshot and application the worker keeps training, so the elastic force is computed
from the snapshot, as the rule's pre-step term, and applied a few steps later: the price of no
barrier. A peer that never answers costs one deadline and nothing else.

No draw is thrown away. A successful draw (probability p per step) is owed until it can start:
while the sender is still sending, while every peer already has an exchange with us in flight,
or while no snapshot is free, it waits and starts at the first step that allows it, with a peer
chosen among those free. At most MAX_OWED draws wait; a draw beyond that lapses and is counted
(`lapsed`): the link cannot carry the configured rate. Fewer wait where the rate controller's
pace carries fewer of this model's messages in AIR_HORIZON_S: a draw beyond is held by the air
(`air_held`), the exchange rate sized to the device's share of the channel. Likewise an Elastic
Gossip (or pull) request that finds no free snapshot is answered as soon as one frees, if its
deadline has not passed (else `answer_lapsed`). The counters `drawn` and `initiated`, and the
agent's `exchanges_initiated_per_step`, show the rate that really ran beside the configured p.

How long an exchange waits for the peer is per link: fixed, or adaptive from the transfer times
that link has shown (protocol/deadlines.py).

Who is there (liveness.py): a peer is heard whenever a round of its arrives, and silent once
nothing has come from it for several of its usual gaps. Silent peers and two alarms (merges
stopped while peers are heard; for push-sum, a weight below its floor) are in every metrics
record, `status` and /metrics, and logged when they begin and end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from edgegossip.algorithms.attack import Attack
from edgegossip.dataplane import wire
from edgegossip.dataplane.sender import Snapshot
from edgegossip.protocol.base import Context, Protocol
from edgegossip.protocol.bound import Bound
from edgegossip.protocol.deadlines import Deadlines
from edgegossip.protocol.liveness import Liveness

SETTLE_S = 0.5  # silence after the last chunk that ends waiting for the rest
MAX_OWED = 8  # draws waiting for a free link or snapshot; a further draw lapses (counted)
# Draws wait only for as many messages as the air carries in this long at the controller's pace:
# one further is held (counted `air_held`), so a large model on a shared channel draws what the
# channel carries instead of drawing and lapsing
AIR_HORIZON_S = 2.0


@dataclass
class Pending:
    peer: int
    pre: Snapshot | None  # our snapshot (None for push receipts: they use x itself)
    deadline: float
    round: int | None = None  # the peer's round we apply; None until its reply shows up
    started: float = 0.0
    weight: float = 0.0  # the push-sum weight a push receipt carries


class GossipProtocol(Protocol):
    """The shared machinery; a subclass says how an exchange starts (_start), how a peer's
    request is answered (_answer), what an unasked-for round means (_on_params), and how what
    arrived is merged (_merge)."""

    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.round = 0
        self.pending: dict[int, Pending] = {}
        self.ids = sorted(ctx.peers)
        self.owed = 0  # draws not yet started
        # peer -> (its round, deadline, the slice it carried)
        self.owed_answers: dict[int, tuple[int, float, int]] = {}
        self.next_slice = 0  # the slice of the model our next exchange carries (train.slices)
        self.merged_by: dict[int, int] = {}  # rounds that moved our parameters, by peer
        cfg = ctx.cfg
        self.deadlines = Deadlines(
            cfg.deadline, cfg.deadline_s, cfg.deadline_min_s, cfg.deadline_max_s, SETTLE_S
        )
        self.liveness = Liveness(self.ids, cfg.workers, cfg.p, self.deadlines.for_peer)
        self.bound = Bound(ctx.plan, self.ids, cfg.bound)
        # emulate --hostile: this device sends what the attack makes (algorithms/attack.py)
        self.attack = Attack(cfg.attack) if cfg.attack != "none" else None

    # a draw is among whoever the peers are now, in a fleet of whatever size
    live_settings = frozenset({"peers", "workers"})

    def peers_changed(self) -> None:
        """An exchange in flight with a removed peer ends at its deadline, as with one gone
        quiet; its rounds are not merged meanwhile (_on_event admits ctx.peers only)."""
        self.ids = sorted(self.ctx.peers)
        self.liveness.set_peers(self.ids, self.ctx.cfg.workers, time.monotonic())
        self.bound.set_peers(self.ids)

    def _pending(self, peer: int, pre: Snapshot | None, now: float, rnd: int | None = None) -> None:
        self.pending[peer] = Pending(peer, pre, now + self.deadlines.for_peer(peer), rnd, now)

    def _send_params(
        self, peer: int, snap: Snapshot, flags: int = 0, weight: int = 0, block: int | None = None
    ) -> None:
        """Send snap to peer: the whole model, or with train.slices one slice of it, `block`
        (an answer carries the slice it answers) or the next in turn, so that every slice
        travels as often."""
        self.round += 1
        if self.attack is not None:
            self.attack.apply(snap.vec)
        slices, chunks = self.ctx.cfg.slices, None
        if slices > 1:
            if block is None:
                block, self.next_slice = self.next_slice, (self.next_slice + 1) % slices
            chunks = self.ctx.plan.block_chunks(block, slices)
        self.sender.send(
            peer,
            snap,
            wire.MsgType.PARAMS,
            self.round,
            chunks=chunks,
            block=block or 0,
            flags=flags,
            weight=weight,
        )

    def _send_now(self, peer: int, x: np.ndarray) -> bool:
        """Send a copy of x and keep nothing (push, and answers to pull requests)."""
        snap = self.snapshots.take(x)
        if snap is None:
            return False
        self._send_params(peer, snap, weight=self._outgoing_weight(peer))
        snap.release()
        return True

    def _outgoing_weight(self, peer: int) -> int:
        """The header's weight field for a round sent to peer now (push-sum's running sum)."""
        return 0

    def _choose(self, free: list[int], now: float) -> int:
        """The peer a drawn exchange starts with, among those free: uniform."""
        return free[int(self.ctx.rng.integers(len(free)))]

    def before_step(self, x: np.ndarray, step: int) -> None:
        ctx = self.ctx
        now = time.monotonic()
        self.liveness.step(now)
        for ev in self.rounds.events():
            self._on_event(ev, x, now)
        self._answer_owed(x, now)
        if ctx.rng.random() < ctx.cfg.p:
            ctx.exchanges["drawn"] += 1
            if self.owed < self._owed_limit():
                self.owed += 1
            else:
                ctx.exchanges["air_held" if self.owed < MAX_OWED else "lapsed"] += 1
        if self.owed and self.sender.busy == 0:
            free = [j for j in self.ids if j not in self.pending and j not in self.owed_answers]
            if free and self._start(self._choose(free, now), x, now):
                self.owed -= 1
                ctx.exchanges["initiated"] += 1

    def _owed_limit(self) -> int:
        """How many draws may wait: MAX_OWED, or fewer where the air carries fewer of our
        messages in AIR_HORIZON_S at the pace the rate controller allows (at least one)."""
        chunks = -(-self.ctx.plan.n_chunks // self.ctx.cfg.slices)  # a slice, or the model
        message = chunks * self.sender.encoder.datagram_bytes
        room = self.sender.room(message, AIR_HORIZON_S)
        return MAX_OWED if room is None else max(1, min(MAX_OWED, room))

    def _start(self, j: int, x: np.ndarray, now: float) -> bool:
        """Start an exchange with j; False (nothing sent) when no snapshot is free."""
        raise NotImplementedError

    def _answer_owed(self, x: np.ndarray, now: float) -> None:
        """Answer requests that found no free snapshot, while they are still worth it."""
        for peer, (rnd, deadline, block) in list(self.owed_answers.items()):
            if now >= deadline:
                del self.owed_answers[peer]
                self.ctx.exchanges["answer_lapsed"] += 1
            elif self._answer(peer, rnd, x, now, block):
                del self.owed_answers[peer]

    def _answer(self, peer: int, rnd: int, x: np.ndarray, now: float, block: int = 0) -> bool:
        """Answer peer's round rnd (carrying slice `block`) with the same slice of our pre-step
        parameters, and wait for its round."""
        pre = self.snapshots.take(x)
        if pre is None:
            return False
        self._send_params(peer, pre, block=block)
        self._pending(peer, pre, now, rnd)
        return True

    def _answer_or_owe(self, ev, x: np.ndarray, now: float) -> None:
        if not self._answer(ev.sender, ev.round, x, now, ev.block):
            deadline = now + self.deadlines.for_peer(ev.sender)
            self.owed_answers[ev.sender] = (ev.round, deadline, ev.block)

    def _on_event(self, ev, x: np.ndarray, now: float) -> None:
        ctx = self.ctx
        if ev.sender not in ctx.peers:
            return
        self.liveness.heard(ev.sender, now)
        if ev.msg_type == wire.MsgType.REQUEST:
            self._on_request(ev, x, now)
            return
        if ev.msg_type != wire.MsgType.PARAMS:
            return
        p = self.pending.get(ev.sender)
        if p is not None and p.round is None:
            # the reply to our exchange; for EG a REPLY-flagged round here is a mutual pick:
            # both sides already sent pre-step parameters, so it counts once
            p.round = ev.round
            return
        if not self._on_params(ev, p, x, now):
            # nothing will collect it: its buffer goes back to the pool now, for a round that
            # is wanted, instead of after the inbox's stale_s (a late answer to an exchange
            # that timed out, a new exchange from a peer we are still merging with)
            self.rounds.discard(ev.sender, ev.msg_type, ev.round)

    def _on_request(self, ev, x: np.ndarray, now: float) -> None:
        """A peer's REQUEST: only the pull protocol answers one."""

    def _on_params(self, ev, p: Pending | None, x: np.ndarray, now: float) -> bool:
        """A PARAMS round that answers no exchange of ours (p: what we have pending with its
        sender, if anything); True if an exchange will collect it."""
        return False

    def _merge(self, x: np.ndarray, p: Pending, r) -> bool:
        """Merge the receive buffer r (r.buf, r.mask) of exchange p into x; whether anything
        of it moved x."""
        raise NotImplementedError

    def _nothing_kept(self, p: Pending) -> None:
        """Exchange p ended with no buffer to merge (nothing arrived, or none was free)."""

    def after_step(self, x: np.ndarray, step: int) -> None:
        now = time.monotonic()
        for peer, p in list(self.pending.items()):
            expired = now >= p.deadline
            if p.round is None:
                if expired:
                    self.deadlines.observe(peer, p.started, None, p.deadline, False)
                    self._finish(p)
                    self.ctx.exchanges["timed_out"] += 1
                continue
            if not expired and not self.rounds.ready(peer, wire.MsgType.PARAMS, p.round, SETTLE_S):
                continue
            # merged straight from the receive buffer: no copy of the model per exchange
            r, got = self.rounds.borrow(peer, wire.MsgType.PARAMS, p.round)
            expected = r.expected if r is not None else self.ctx.plan.n_chunks  # or its slice
            self.record(r.mask if r is not None else None, got, expected)
            self.deadlines.observe(
                peer, p.started, r.updated if r is not None else None, p.deadline, got >= expected
            )
            if r is not None:
                try:
                    self._merge_bounded(x, p, r, now)
                finally:
                    self.rounds.give_back(r)
            else:
                self._nothing_kept(p)
            self._finish(p)
        if self.liveness.due(now):
            self.liveness.check(now, self._alarms(now))

    def _merge_bounded(self, x: np.ndarray, p: Pending, r, now: float) -> None:
        """Merge what arrived of p's round once the bound (bound.py) has clipped it toward
        what the merge moves from; a refused round counts as if nothing had arrived."""
        assert r.buf is not None  # borrowed rounds hold their buffer
        if self.attack is not None:
            self.attack.heard(r.buf)
        ref = p.pre.vec if p.pre is not None else x
        if not self.bound.admit(p.peer, r.buf, ref, r.mask):
            self._nothing_kept(p)
            return
        if self._merge(x, p, r):
            self.merged_by[p.peer] = self.merged_by.get(p.peer, 0) + 1
        self.liveness.merged(now)

    def _alarms(self, now: float) -> set[str]:
        """Alarms besides liveness's own: a peer the merge bound suspects, and the
        algorithm's (a subclass adds to these)."""
        return {"suspect_peer"} if self.bound.suspects else set()

    def _finish(self, p: Pending) -> None:
        del self.pending[p.peer]
        if p.pre is not None:
            p.pre.release()

    def metrics(self) -> dict:
        return {
            "deadline_s_by_link": self.deadlines.snapshot(),
            "merged_by_peer": {str(j): n for j, n in sorted(self.merged_by.items())},
            **self.liveness.metrics(),
            **self.bound.metrics(),
        }
