"""Gossiping SGD, push variant (Jin et al. 2016, arXiv 1611.04581), as push-sum gossip (Kempe et
al. 2003), the averaging the push variant rests on. The paper's own text could not be consulted
here, so this is push-sum as Kempe et al. state it, kept in its de-biased form.

Every worker holds a weight w_i, 1 at the start, so the fleet's weights sum to W. With
probability p per step, worker i picks a peer j uniformly, gives away half its weight and sends
it with its pre-step parameters y:

    s = w_i / 2 (rounded to float16, as the header carries it),   w_i <- w_i - s

The receiver merges what arrived as a weighted mean, chunk by chunk (m is the chunk mask):

    x_j <- x_j + m * s / (w_j + s) * (y - x_j),    w_j <- w_j + s

So x_j is push-sum's ratio (sum of w x) / (sum of w), and messages that arrive in one step give
the same result in any order: 0 (weight 1) receiving 4 and then 8, each sent with weight 1/2,
ends at (1*0 + 0.5*4 + 0.5*8) / 2 = 3 with weight 2 either way, and the fleet's sum of w x, 12,
is what the three held before. The optimizer steps x itself (the de-biased parameters).

Lost datagrams: the weight is one number per worker, not one per chunk, so a chunk that did not
arrive counts as the receiver's own value there (x_j unchanged in that chunk, w_j still grows by
s). The fleet's weights then keep summing to W, and no weight drains away with every lost
datagram; only a message of which nothing arrived (the receiver never learns of it) loses its s.
The price: on a lost chunk, the merge depends on order (the receiver's value stands in for the
sender's), so the rule is exact push-sum only where everything arrived.

A hostile peer: honest weights sum to W, so no worker ever holds more than W and no message
carries more than W/2 (up to float16's rounding). A receiver takes a weight outside [0, W/2] as
0 (the message then changes nothing) and never lets its own weight pass W, so what a key holder
sends can skew a mean but never grow a weight past what float16 carries and end an agent.
"""

from __future__ import annotations

import numpy as np

from edgegossip import kernels
from edgegossip.algorithms.base import GossipAlgorithm, World
from edgegossip.algorithms.elastic_gossip import choose_peers

__all__ = ["choose_peers", "give", "admit", "apply", "GossipPush"]


def give(w: float) -> tuple[float, float]:
    """Sender: (s, what it keeps). s is half of w rounded to float16, so that s is exactly what
    the receiver reads and no weight is made or lost in rounding."""
    s = float(np.float16(w / 2))
    return s, w - s


def admit(s: float, workers: int) -> float:
    """Receiver: the weight s a message claims, as taken: s if an honest sender could have sent
    it (0 <= s <= W/2, float16's rounding allowed for), else 0."""
    ok = np.isfinite(s) and 0.0 <= s <= workers / 2 * (1 + 2**-10)
    return float(s) if ok else 0.0


def apply(
    x: np.ndarray,
    y: np.ndarray,
    mask: np.ndarray,
    chunk_elems: int,
    w: float,
    s: float,
    workers: int | None = None,
) -> float:
    """Receiver: merge y (arrived where mask is set), sent with weight s, into x, which has
    weight w; returns x's new weight (never above `workers`, the fleet's total, when given)."""
    if s > 0 and w + s > 0:
        kernels.elastic_pull(x, x, y, mask, chunk_elems, s / (w + s))
    return w + s if workers is None else min(w + s, float(workers))


class GossipPush(GossipAlgorithm):
    name = "gossip-push"
    push_weight = True
    protocol = "edgegossip.protocol.gossip_push:PushProtocol"

    @classmethod
    def merge(cls, world: World, picks: list[int | None]) -> None:
        given = {}
        weights = world.weights
        for i, j in enumerate(picks):
            if j is not None:
                given[i], weights[i] = give(weights[i])
        for i, j in enumerate(picks):
            if j is not None:
                mask = world.net.send(i, world.whole)
                if mask.any():  # else the receiver never learns of it: s is lost
                    weights[j] = apply(
                        world.xs[j],
                        world.sent[i],
                        mask,
                        world.plan.chunk_elems,
                        weights[j],
                        given[i],
                    )

    @classmethod
    def sim_report(cls, world: World) -> dict:
        return {"push_weight_sum": round(sum(world.weights), 6)}
