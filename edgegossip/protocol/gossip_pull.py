"""Gossiping SGD, pull, between devices (algorithm: edgegossip/algorithms/gossip_pull.py).

With probability p per step, i snapshots x_i (pre-step) and sends j a REQUEST; j answers with a
copy of its parameters and keeps nothing; i applies x <- x - m (pre - y) / 2 once j's round is
complete, silent, or past its deadline.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms import gossip_pull
from edgegossip.protocol.gossip import GossipProtocol, Pending


class PullProtocol(GossipProtocol):
    def _start(self, j: int, x: np.ndarray, now: float) -> bool:
        pre = self.snapshots.take(x)
        if pre is None:
            return False
        self.round += 1
        self.sender.request(j, self.round)
        self._pending(j, pre, now)
        return True

    def _answer(self, peer: int, rnd: int, x: np.ndarray, now: float, block: int = 0) -> bool:
        return self._send_now(peer, x)

    def _on_request(self, ev, x: np.ndarray, now: float) -> None:
        self._answer_or_owe(ev, x, now)

    def _merge(self, x: np.ndarray, p: Pending, r) -> bool:
        assert p.pre is not None  # the initiator's snapshot
        gossip_pull.apply(x, p.pre.vec, r.buf, r.mask, self.ctx.plan.chunk_elems)
        return True
