"""Elastic Gossip between devices (algorithm: edgegossip/algorithms/elastic_gossip.py).

With probability p per step, i snapshots x_i (pre-step), sends it to a random j flagged REPLY,
and waits for j's next PARAMS. j, seeing a REPLY-flagged round from i, snapshots its own pre-step
x_j, sends it back, and waits for i's round. Each side applies x <- x - alpha * m * (pre - y)
once the other's round is complete, silent, or past its deadline. A REPLY-flagged round from a
peer we already sent to is a mutual pick: both sides sent pre-step parameters, so it counts once.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms import elastic_gossip
from edgegossip.dataplane import wire
from edgegossip.protocol.gossip import GossipProtocol, Pending


class ElasticGossipProtocol(GossipProtocol):
    def _start(self, j: int, x: np.ndarray, now: float) -> bool:
        pre = self.snapshots.take(x)
        if pre is None:
            return False
        self._send_params(j, pre, wire.FLAG_REPLY)
        self._pending(j, pre, now)
        return True

    def _on_params(self, ev, p: Pending | None, x: np.ndarray, now: float) -> bool:
        if ev.flags & wire.FLAG_REPLY and p is None:
            self._answer_or_owe(ev, x, now)
            return True
        return False

    def _merge(self, x: np.ndarray, p: Pending, r) -> bool:
        assert p.pre is not None  # both ends keep their pre-step snapshot
        elastic_gossip.apply(
            x, p.pre.vec, [(r.buf, r.mask)], self.ctx.cfg.alpha, self.ctx.plan.chunk_elems
        )
        return True
