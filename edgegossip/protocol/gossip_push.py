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

What a peer may hold of i's weight (a device's only defence against a peer holding its own
link's key that takes weight and never gives any back, issues 54 and 67): i keeps, per peer j,
the weight it has lent j,

    lent_ij = max(0, (weight i gave j) - (weight j gave i)),

never below 0, so weight j says it gave beyond what it was lent (a running sum that moves
without weight behind it) earns j no further room; and a push gives j at most
LEND_SHARE - lent_ij (half a fair share; a fair share is 1, the fleet's W shared by W devices).
So a peer, whatever its running sums say, holds at most LEND_SHARE of each neighbour's weight,
and the honest devices keep at least (W - 1) * (1 - LEND_SHARE) between them; a push toward it
is drawn only while there is room. What j holds comes back (w_i += lent_ij, lent_ij = 0)
without waiting for j to stop: once liveness names j silent, or once DRY_ROUNDS rounds in a row
from j brought no weight while it held some of i's (an honest j with i's weight gives some back
with its next push to i, a round heard from i having given it credit; one that keeps answering
with sums that never move is taken back from within a few of its rounds). An honest peer that
comes back, or turns out only slow, and gives back weight already taken back brings the fleet's
total above W by at most that, once; a weight is capped at W all the same. lent is kept in
checkpoints, so a restart neither forgets what a peer holds nor lends it again.
"""

from __future__ import annotations

import numpy as np

from edgegossip.algorithms import gossip_push
from edgegossip.protocol.gossip import GossipProtocol, Pending

PROBE_EVERY = 4  # at most one push in this many goes to a peer without credit, as a probe
CREDITS = 2  # pushes with weight a round heard from a peer allows toward it
LEND_SHARE = 0.5  # the most weight one peer may hold of ours, net (a fair share is 1)
DRY_ROUNDS = 4  # rounds in a row bringing no weight from a peer holding ours: taken back
WEIGHT_FLOOR = 2.0**-6  # below this share of a fresh worker's weight: weight_below_floor


class PushProtocol(GossipProtocol):
    # the unit of a running sum is set by the fleet's size: a new size restarts the agent
    live_settings = frozenset({"peers"})

    def __init__(self, ctx):
        super().__init__(ctx)
        self.sums = dict.fromkeys(self.ids, 0)  # running sum sent on each link, this session
        self.seen: dict[int, tuple[int, int]] = {}  # peer -> (its session, last sum seen)
        self.credit = dict.fromkeys(self.ids, 0)  # pushes with weight allowed toward each peer
        self.lent = dict.fromkeys(self.ids, 0.0)  # weight given to each peer minus taken from it
        self.dry = dict.fromkeys(self.ids, 0)  # rounds in a row from each peer that brought none
        self.reclaimed = 0.0  # weight taken back from peers gone silent
        self.pushes = 0
        self.probes = 0
        self.weights_refused = 0  # sums no honest sender could have sent

    def _start(self, j: int, x: np.ndarray, now: float) -> bool:
        return self._send_now(j, x)

    def _room(self, j: int) -> float:
        """What a push may still give j: its credit, and what it may hold of ours."""
        if self.credit.get(j, 0) <= 0:
            return 0.0
        room = LEND_SHARE - self.lent.get(j, 0.0)
        return room if room >= gossip_push.unit(self.ctx.cfg.workers) else 0.0

    def _choose(self, free: list[int], now: float) -> int:
        live = [j for j in free if self._room(j) > 0]
        quiet = [j for j in free if j not in live]
        self.pushes += 1
        pool = quiet if quiet and (not live or self.pushes % PROBE_EVERY == 0) else live
        return pool[int(self.ctx.rng.integers(len(pool)))]

    def _outgoing_weight(self, peer: int) -> int:
        room = self._room(peer)
        if room > 0:
            self.credit[peer] -= 1
            counts, self.ctx.push_weight = gossip_push.give(
                self.ctx.push_weight, self.ctx.cfg.workers, room
            )
            u = gossip_push.unit(self.ctx.cfg.workers)
            self.lent[peer] = self.lent.get(peer, 0.0) + counts * u
            self.sums[peer] = (self.sums.get(peer, 0) + counts) % gossip_push.SUM_MOD
        else:
            self.probes += 1
        return self.sums.get(peer, 0)

    def _take(self, ev) -> float:
        """The weight a round brought: its link's running sum minus the last one seen."""
        session, rho = self.seen.get(ev.sender, (ev.session, 0))
        if session != ev.session:  # the sender started again: its sums count from 0
            rho = 0
        self.seen[ev.sender] = (ev.session, ev.weight)
        d = gossip_push.taken(ev.weight, rho, self.ctx.cfg.workers)
        if d is None:
            self.weights_refused += 1
            d = 0.0
        j = ev.sender
        self.lent[j] = max(0.0, self.lent.get(j, 0.0) - d)
        self.dry[j] = 0 if d > 0 else self.dry.get(j, 0) + 1
        if self.dry[j] >= DRY_ROUNDS and self.lent[j] > 0:
            self._reclaim(j)  # it keeps taking and gives nothing back
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

    def _merge(self, x: np.ndarray, p: Pending, r) -> bool:
        """A receipt that brought no weight (a probe, or a peer's sum that did not move)
        leaves x as it is."""
        self.ctx.push_weight = gossip_push.apply(
            x,
            r.buf,
            r.mask,
            self.ctx.plan.chunk_elems,
            self.ctx.push_weight,
            p.weight,
            self.ctx.cfg.workers,
        )
        return p.weight > 0

    def _nothing_kept(self, p: Pending) -> None:
        self._gain(p.weight)  # no buffer: as if it carried our own value

    def after_step(self, x: np.ndarray, step: int) -> None:
        super().after_step(x, step)
        for j in self.liveness.silent:
            if self.lent.get(j, 0.0) > 0:
                self._reclaim(j)

    def _reclaim(self, j: int) -> None:
        """j is silent, or gives nothing back: what it holds of our weight comes back to us."""
        back, self.lent[j] = self.lent[j], 0.0
        self.reclaimed += back
        self._gain(back)

    def _alarms(self, now: float) -> set[str]:
        low = self.ctx.push_weight < WEIGHT_FLOOR
        return super()._alarms(now) | ({"weight_below_floor"} if low else set())

    def checkpoint(self) -> dict[str, np.ndarray]:
        seen = np.array(
            [(j, s, r) for j, (s, r) in sorted(self.seen.items())], dtype=np.int64
        ).reshape(-1, 3)
        lent = np.array(sorted(self.lent.items()), dtype=np.float64).reshape(-1, 2)
        return {
            "push_weight": np.array(self.ctx.push_weight),
            "push_seen": seen,
            "push_lent": lent,
        }

    def restore(self, state: dict[str, np.ndarray]) -> None:
        if "push_weight" in state:
            w = float(state["push_weight"])
            # a checkpoint holds what _gain() allowed; anything else starts from 1 again
            ok = np.isfinite(w) and 0.0 < w <= self.ctx.cfg.workers
            self.ctx.push_weight = w if ok else 1.0
        lent = state.get("push_lent")
        if lent is not None and lent.ndim == 2 and lent.shape[1] == 2:
            for j, v in lent:  # a checkpoint holds what _outgoing_weight allowed; clamp all else
                if int(j) in self.lent and np.isfinite(v):
                    self.lent[int(j)] = float(min(max(v, 0.0), LEND_SHARE))
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
            "push_lent": {str(j): round(v, 6) for j, v in sorted(self.lent.items())},
            "push_reclaimed": round(self.reclaimed, 6),
        }
