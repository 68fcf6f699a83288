"""Elastic Gossip (Pramod 2018, arXiv 1812.02407).

Each step every worker i independently, with probability p, picks one peer uniformly among the
other W - 1. Its exchange set P_i is the peer it picked plus every worker that picked it (a mutual
pick counts once). Both ends send their pre-step parameters, and each applies

    x_i <- step(x_i) - alpha * sum_{j in P_i} m_j * (x_i - x_j)

with x_i, x_j the pre-step parameters and m_j the per-chunk mask of what arrived from j. The
momentum buffer is not touched by the elastic term. alpha defaults to 0.5.
"""

from __future__ import annotations

import numpy as np

from edgegossip import kernels
from edgegossip.algorithms.base import GossipAlgorithm, World


def exchange_sets(picks: list[int | None]) -> list[set[int]]:
    """P_i = {pick_i} | {j : pick_j == i}."""
    sets = [set() if p is None else {p} for p in picks]
    for j, p in enumerate(picks):
        if p is not None:
            sets[p].add(j)
    return sets


def apply(
    x: np.ndarray,
    pre: np.ndarray,
    received: list[tuple[np.ndarray, np.ndarray]],
    alpha: float,
    chunk_elems: int,
) -> None:
    """x (already stepped) -= alpha * m_j * (pre - y_j) for each received (y_j, m_j)."""
    for y, mask in received:
        kernels.elastic_pull(x, pre, y, mask, chunk_elems, alpha)


class ElasticGossip(GossipAlgorithm):
    name = "elastic-gossip"
    sends_model = True
    settings = ("p", "alpha", "slices")
    protocol = "edgegossip.protocol.elastic_gossip:ElasticGossipProtocol"

    @classmethod
    def merge(cls, world: World, picks: list[int | None]) -> None:
        sets = exchange_sets(picks)
        ce = world.plan.chunk_elems
        chunks = world.slice_now()
        for i in range(world.n):
            received = [(world.sent[j], world.net.send(j, chunks)) for j in sorted(sets[i])]
            apply(world.xs[i], world.pres[i], received, world.alpha, ce)
