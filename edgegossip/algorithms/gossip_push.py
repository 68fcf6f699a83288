"""Gossiping SGD, push variant (Jin et al. 2016, arXiv 1611.04581), as push-sum gossip (Kempe et
al. 2003) with running sums on each link (Hadjicostis, Vaidya and Dominguez-Garcia, "Robust
distributed average consensus via exchange of running sums", IEEE TAC 2016), so that the weight
of a lost message is not lost for good.

Every worker holds a weight w_i, 1 at the start, so the fleet's weights sum to W. With
probability p per step, worker i picks a peer j, gives away half its weight and adds it to the
running sum it keeps for the link i -> j:

    s = floor(w_i / 2 / u) * u,   w_i <- w_i - s,   sigma_ij <- sigma_ij + s

and sends sigma_ij (not s) with its pre-step parameters y. The receiver keeps rho_ij, the last
sum it saw on that link, and takes what arrived since:

    d = sigma_ij - rho_ij,   rho_ij <- sigma_ij

then merges y as a weighted mean, chunk by chunk (m is the chunk mask):

    x_j <- x_j + m * d / (w_j + d) * (y - x_j),    w_j <- w_j + d

So x_j is push-sum's ratio (sum of w x) / (sum of w): 0 (weight 1) receiving 4 and then 8, each
with d = 1/2, ends at (1*0 + 0.5*4 + 0.5*8) / 2 = 3 with weight 2 in either order.

What a lost message costs: a message of which nothing arrived leaves rho_ij behind, so its s
arrives with the next message on that link that gets through, inside d. The weights lose
nothing for good: sum_i w_i + (weight in flight) = W at every moment, and the weight in flight
on a link is what its next arrival brings. The values are not as exact: that late weight is
merged with the newer message's y, not with the lost message's own parameters (running sums of
w x would need a model-sized accumulator per link on both ends and could not be quantised like
parameters). A chunk that did not arrive counts as the receiver's own value there (x_j
unchanged in that chunk, w_j still grows by d), so the merge is exact push-sum only where
everything arrived.

The wire: sigma travels as 16 bits, a count of units u = R / 2^16 modulo R = 2^(ceil(log2 W)+1)
(both ends know W). The weight in flight on a link never exceeds W < R, so d = (sigma - rho) mod
R is the true difference. A difference larger than W is one no honest sender could cause (a
sender whose sums went back, or a receiver that lost its own): it is taken as 0 and the link's
sum is taken as the new baseline, so what a key holder sends can skew a mean but never grow a
weight past W. Sums count within a sender's session (which every start raises): a session the
receiver has not seen starts from 0. A sender's restart from its checkpoint gets back the weight
it had given away since; a weight is capped at W all the same.

A peer that is off: what is pushed to it is in flight until it comes back. So on a device a
worker pushes weight to a peer only on a sign of life: each round heard from it allows a few
pushes with weight (protocol/gossip_push.py); other pushes are probes, its parameters with the
running sum unchanged (d = 0 unless earlier weight is still in flight), until the peer is heard
again. The simulation has no device that is off, and every worker gives at every push.
"""

from __future__ import annotations

import math

import numpy as np

from edgegossip import kernels
from edgegossip.algorithms.base import GossipAlgorithm, World, choose_peers

__all__ = ["choose_peers", "unit", "give", "taken", "apply", "GossipPush"]

SUM_BITS = 16  # the header's field
SUM_MOD = 1 << SUM_BITS


def unit(workers: int) -> float:
    """u: the weight one count of the header's running sum stands for, in a fleet of W."""
    ring = 2.0 ** (math.ceil(math.log2(max(1, workers))) + 1)
    return ring / SUM_MOD


def give(w: float, workers: int, room: float = math.inf) -> tuple[int, float]:
    """Sender: (counts given, the weight kept). Half of w, and no more than room, rounded down
    to whole units, so the receiver takes exactly what was given and no weight is made or lost
    in rounding."""
    u = unit(workers)
    counts = int(min(w / 2, room) / u)
    return counts, w - counts * u


def taken(sigma: int, rho: int, workers: int) -> float | None:
    """Receiver: the weight that came on a link whose running sum went from rho to sigma
    (counts, modulo 2^16); None if no honest sender could have caused it."""
    d = ((sigma - rho) % SUM_MOD) * unit(workers)
    return d if d <= workers else None


def apply(
    x: np.ndarray,
    y: np.ndarray,
    mask: np.ndarray,
    chunk_elems: int,
    w: float,
    d: float,
    workers: int | None = None,
) -> float:
    """Receiver: merge y (arrived where mask is set), that brought weight d, into x, which has
    weight w; returns x's new weight (never above `workers`, the fleet's total, when given)."""
    if d > 0 and w + d > 0:
        kernels.elastic_pull(x, x, y, mask, chunk_elems, d / (w + d))
    return w + d if workers is None else min(w + d, float(workers))


class GossipPush(GossipAlgorithm):
    name = "gossip-push"
    push_weight = True
    protocol = "edgegossip.protocol.gossip_push:PushProtocol"

    @classmethod
    def merge(cls, world: World, picks: list[int | None]) -> None:
        """One step's pushes; world.link_sums holds (sigma, rho) per link, in counts."""
        W, weights, sums = world.n, world.weights, world.link_sums
        for i, j in enumerate(picks):
            if j is not None:
                counts, weights[i] = give(weights[i], W)
                sigma, rho = sums.get((i, j), (0, 0))
                sums[(i, j)] = ((sigma + counts) % SUM_MOD, rho)
        for i, j in enumerate(picks):
            if j is None:
                continue
            mask = world.net.send(i, world.whole)
            if not mask.any():  # the receiver never learns of it: its weight stays in flight
                continue
            sigma, rho = sums[(i, j)]
            sums[(i, j)] = (sigma, sigma)
            d = taken(sigma, rho, W) or 0.0
            weights[j] = apply(
                world.xs[j], world.sent[i], mask, world.plan.chunk_elems, weights[j], d
            )

    @classmethod
    def sim_report(cls, world: World) -> dict:
        u = unit(world.n)
        flight = sum((s - r) % SUM_MOD for s, r in world.link_sums.values()) * u
        return {
            "push_weight_sum": round(sum(world.weights), 6),
            "push_weight_in_flight": round(flight, 6),
        }
