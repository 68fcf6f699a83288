"""Gossiping SGD, push, as push-sum between devices with running sums on each link (algorithm:
algorithms/gossip_push.py).

With probability p per step, i gives away half its push-sum weight to a peer it has heard from
recently, adds it to that link's running sum, and sends the sum with a copy of its parameters;
the receiver takes the difference from the last sum it saw on the link and merges the
parameters as a weighted mean once they are in. A round that finds an earlier one from the same
sender still pending is not merged, and what it brought is taken as if it carried our own value;
so is what a receipt brought that ends with no buffer to merge.

Weight goes only where there is a sign of life: every round heard from j gives i CREDITS
pushes with weight to j, each push with weight spends one. So when j goes off, at most CREDITS
pushes' weight goes into flight toward it (at most 1 - 2^-CREDITS of i's weight, back when j
returns), however long its silence takes to notice. A push drawn when no free peer has credit
is a probe: i's parameters with the link's running sum unchanged, to a peer without credit,
one push in PROBE_EVERY at most while others have credit. A probe moves no weight, but the peer
hears i and answers with rounds of its own, which give i credit again.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms import gossip_push
from edgegossip.protocol.gossip import GossipProtocol, Pending

PROBE_EVERY = 4  # at most one push in this many goes to a peer without credit, as a probe
CREDITS = 2  # pushes with weight a round heard from a peer allows toward it
WEIGHT_FLOOR = 2.0**-6  # below this share of a fresh worker's weight: weight_below_floor


class PushProtocol(GossipProtocol):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.sums = dict.fromkeys(self.ids, 0)  # running sum sent on each link, this session
        self.seen: dict[int, tuple[int, int]] = {}  # peer -> (its session, last sum seen)
        self.credit = dict.fromkeys(self.ids, 0)  # pushes with weight allowed toward each peer
        self.pushes = 0
        self.probes = 0
        self.weights_refused = 0  # sums no honest sender could have sent

    def _start(self, j: int, x: np.ndarray, now: float) -> bool:
        return self._send_now(j, x)

    def _choose(self, free: list[int], now: float) -> int:
        live = [j for j in free if self.credit[j] > 0]
        quiet = [j for j in free if j not in live]
        self.pushes += 1
        pool = quiet if quiet and (not live or self.pushes % PROBE_EVERY == 0) else live
        return pool[int(self.ctx.rng.integers(len(pool)))]

    def _outgoing_weight(self, peer: int) -> int:
        if self.credit[peer] > 0:
            self.credit[peer] -= 1
            counts, self.ctx.push_weight = gossip_push.give(
                self.ctx.push_weight, self.ctx.cfg.workers
            )
            self.sums[peer] = (self.sums[peer] + counts) % gossip_push.SUM_MOD
        else:
            self.probes += 1
        return self.sums[peer]

    def _take(self, ev) -> float:
        """The weight a round brought: its link's running sum minus the last one seen."""
        session, rho = self.seen.get(ev.sender, (ev.session, 0))
        if session != ev.session:  # the sender started again: its sums count from 0
            rho = 0
        self.seen[ev.sender] = (ev.session, ev.weight)
        d = gossip_push.taken(ev.weight, rho, self.ctx.cfg.workers)
        if d is None:
            self.weights_refused += 1
            return 0.0
        return d

    def _gain(self, d: float) -> None:
        self.ctx.push_weight = min(self.ctx.push_weight + d, float(self.ctx.cfg.workers))

    def _on_params(self, ev, p: Pending | None, x: np.ndarray, now: float) -> bool:
        self.credit[ev.sender] = CREDITS
        d = self._take(ev)
        if p is None:
            self._pending(ev.sender, None, now, ev.round)
            self.pending[ev.sender].weight = d
            return True
        self._gain(d)
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

    def _alarms(self, now: float) -> set[str]:
        low = self.ctx.push_weight < WEIGHT_FLOOR
        return {"weight_below_floor"} if low else set()

    def checkpoint(self) -> dict[str, np.ndarray]:
        seen = np.array(
            [(j, s, r) for j, (s, r) in sorted(self.seen.items())], dtype=np.int64
        ).reshape(-1, 3)
        return {"push_weight": np.array(self.ctx.push_weight), "push_seen": seen}

    def restore(self, state: dict[str, np.ndarray]) -> None:
        if "push_weight" in state:
            w = float(state["push_weight"])
            # a checkpoint holds what _gain() allowed; anything else starts from 1 again
            ok = np.isfinite(w) and 0.0 < w <= self.ctx.cfg.workers
            self.ctx.push_weight = w if ok else 1.0
        seen = state.get("push_seen")
        if seen is not None and seen.ndim == 2 and seen.shape[1] == 3:
            self.seen = {
                int(j): (int(s), int(r) % gossip_push.SUM_MOD)
                for j, s, r in seen
                if int(j) in self.sums
            }

    def metrics(self) -> dict:
        # weight on its way in: receipts announced but not merged yet
        pending = sum(p.weight for p in list(self.pending.values()))  # read by scrapes too
        return {
            **super().metrics(),
            "push_weight": round(self.ctx.push_weight, 6),
            "push_weight_pending": round(pending, 6),
            "push_weights_refused": self.weights_refused,
            "push_probes": self.probes,
        }
