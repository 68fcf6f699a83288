"""Elastic Gossip and Gossiping SGD (pull, push) between devices, with deadlines, no barrier.

Round numbers: every PARAMS a worker sends carries the next value of its own counter, so each
sender's stream of rounds only grows (the inbox drops older rounds). An exchange is matched by
peer, not by round:

- elastic-gossip: with probability p per step, i snapshots x_i (pre-step), sends it to a random
  j flagged REPLY, and waits for j's next PARAMS. j, seeing a REPLY-flagged round from i,
  snapshots its own pre-step x_j, sends it back, and waits for i's round. Each side applies
  x <- x - alpha * m * (pre - y) once the other's round is complete, silent, or past deadline.
- gossip-pull: i sends a REQUEST; j answers with its parameters; i applies x <- x - m (pre - y)/2.
- gossip-push: i sends its parameters; j applies x <- x - m (x - y)/2 when they are in.

Between snapshot and application the worker keeps training, so the elastic force is computed
from the snapshot, as the rule's pre-step term, and applied a few steps later: the price of no
barrier. A peer that never answers costs one deadline and nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from edgegossip.dataplane import wire
from edgegossip.algorithms import elastic_gossip, gossip_pull, gossip_push
from edgegossip.dataplane.sender import Snapshot
from edgegossip.protocol.base import Context, Protocol

SETTLE_S = 0.5  # silence after the last chunk that ends waiting for the rest


@dataclass
class Pending:
    peer: int
    pre: Snapshot | None       # our snapshot (None for push receipts: they use x itself)
    deadline: float
    round: int | None = None   # the peer's round we apply; None until its reply shows up


class GossipProtocol(Protocol):
    def __init__(self, ctx: Context):
        super().__init__(ctx)
        self.kind = ctx.cfg.algorithm
        self.round = 0
        self.pending: dict[int, Pending] = {}
        self.ids = sorted(ctx.peers)

    def _send_params(self, peer: int, snap: Snapshot, flags: int = 0) -> None:
        self.round += 1
        self.ctx.sender.send(peer, snap, wire.MsgType.PARAMS, self.round, flags=flags)

    def _send_now(self, peer: int, x: np.ndarray) -> None:
        """Send a copy of x and keep nothing (push, and answers to pull requests)."""
        snap = self.ctx.snapshots.take(x)
        if snap is None:
            self.ctx.exchanges["skipped"] += 1
            return
        self._send_params(peer, snap)
        snap.release()

    def before_step(self, x: np.ndarray, step: int) -> None:
        ctx = self.ctx
        now = time.monotonic()
        for ev in ctx.inbox.events():
            self._on_event(ev, x, now)
        if ctx.rng.random() < ctx.cfg.p and ctx.sender.busy == 0:
            j = self.ids[int(ctx.rng.integers(len(self.ids)))]
            if j in self.pending:
                return
            if self.kind == "gossip-push":
                self._send_now(j, x)
                return
            pre = ctx.snapshots.take(x)
            if pre is None:
                ctx.exchanges["skipped"] += 1
            elif self.kind == "gossip-pull":
                self.round += 1
                ctx.sender.request(j, self.round)
                self.pending[j] = Pending(j, pre, now + ctx.cfg.deadline_s)
            else:
                self._send_params(j, pre, wire.FLAG_REPLY)
                self.pending[j] = Pending(j, pre, now + ctx.cfg.deadline_s)

    def _on_event(self, ev, x: np.ndarray, now: float) -> None:
        ctx = self.ctx
        if ev.sender not in ctx.peers:
            return
        if ev.msg_type == wire.MsgType.REQUEST and self.kind == "gossip-pull":
            self._send_now(ev.sender, x)
            return
        if ev.msg_type != wire.MsgType.PARAMS:
            return
        p = self.pending.get(ev.sender)
        if p is not None and p.round is None:
            # the reply to our exchange; for EG a REPLY-flagged round here is a mutual pick:
            # both sides already sent pre-step parameters, so it counts once
            p.round = ev.round
            return
        if self.kind == "elastic-gossip" and ev.flags & wire.FLAG_REPLY and p is None:
            pre = ctx.snapshots.take(x)
            if pre is None:
                ctx.exchanges["skipped"] += 1
                return
            self._send_params(ev.sender, pre)
            self.pending[ev.sender] = Pending(ev.sender, pre, now + ctx.cfg.deadline_s, ev.round)
        elif self.kind == "gossip-push" and p is None:
            self.pending[ev.sender] = Pending(ev.sender, None, now + ctx.cfg.deadline_s, ev.round)

    def after_step(self, x: np.ndarray, step: int) -> None:
        now = time.monotonic()
        for peer, p in list(self.pending.items()):
            expired = now >= p.deadline
            if p.round is None:
                if expired:
                    self._finish(p)
                    self.ctx.exchanges["timed_out"] += 1
                continue
            if not expired and not self.ctx.inbox.ready(peer, wire.MsgType.PARAMS, p.round, SETTLE_S):
                continue
            # merged straight from the receive buffer: no copy of the model per exchange
            r, got = self.ctx.inbox.borrow(peer, wire.MsgType.PARAMS, p.round)
            self.record(r.mask if r is not None else None, got, self.ctx.plan.n_chunks)
            if r is not None:
                try:
                    ce = self.ctx.plan.chunk_elems
                    if self.kind == "elastic-gossip":
                        elastic_gossip.apply(x, p.pre.vec, [(r.buf, r.mask)], self.ctx.cfg.alpha, ce)
                    elif self.kind == "gossip-pull":
                        gossip_pull.apply(x, p.pre.vec, r.buf, r.mask, ce)
                    else:
                        gossip_push.apply(x, r.buf, r.mask, ce)
                finally:
                    self.ctx.inbox.give_back(r)
            self._finish(p)

    def _finish(self, p: Pending) -> None:
        del self.pending[p.peer]
        if p.pre is not None:
            p.pre.release()
