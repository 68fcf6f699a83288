"""Gossiping SGD, push, as push-sum between devices (algorithm: algorithms/gossip_push.py).

With probability p per step, i gives away half its push-sum weight and sends it with a copy of
its parameters; j merges them as a weighted mean once they are in. The weight travels in every
datagram's header. A later round from the same sender that finds the earlier one still pending
is not merged, and its weight is taken as if it carried our own value; so is the weight of a
receipt that ends with no buffer to merge.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms import gossip_push
from edgegossip.dataplane import wire
from edgegossip.protocol.gossip import GossipProtocol, Pending


class PushProtocol(GossipProtocol):
    def _start(self, j: int, x: np.ndarray, now: float) -> bool:
        return self._send_now(j, x)

    weights_refused = 0  # receipts whose weight no honest sender could have sent

    def _outgoing_weight(self) -> int:
        s, self.ctx.push_weight = gossip_push.give(self.ctx.push_weight)
        return wire.weight_bits(s)[0]

    def _admit(self, weight: float) -> float:
        taken = gossip_push.admit(weight, self.ctx.cfg.workers)
        if taken != weight:
            self.weights_refused += 1
        return taken

    def _gain(self, s: float) -> None:
        self.ctx.push_weight = min(self.ctx.push_weight + s, float(self.ctx.cfg.workers))

    def _on_params(self, ev, p: Pending | None, x: np.ndarray, now: float) -> bool:
        if p is None:
            self._pending(ev.sender, None, now, ev.round)
            self.pending[ev.sender].weight = self._admit(ev.weight)
            return True
        self._gain(self._admit(ev.weight))
        return False

    def _merge(self, x: np.ndarray, p: Pending, r) -> None:
        self.ctx.push_weight = gossip_push.apply(
            x,
            r.buf,
            r.mask,
            self.ctx.plan.chunk_elems,
            self.ctx.push_weight,
            p.weight,
            self.ctx.cfg.workers,
        )

    def _nothing_kept(self, p: Pending) -> None:
        self._gain(p.weight)  # no buffer: as if it carried our own value

    def checkpoint(self) -> dict[str, np.ndarray]:
        return {"push_weight": np.array(self.ctx.push_weight)}

    def restore(self, state: dict[str, np.ndarray]) -> None:
        if "push_weight" in state:
            w = float(state["push_weight"])
            # a checkpoint holds what _gain() allowed; anything else starts from 1 again
            ok = np.isfinite(w) and 0.0 < w <= self.ctx.cfg.workers
            self.ctx.push_weight = w if ok else 1.0

    def metrics(self) -> dict:
        # weight on its way in: receipts announced but not merged yet
        pending = sum(p.weight for p in list(self.pending.values()))  # read by scrapes too
        return {
            **super().metrics(),
            "push_weight": round(self.ctx.push_weight, 6),
            "push_weight_pending": round(pending, 6),
            "push_weights_refused": self.weights_refused,
        }
