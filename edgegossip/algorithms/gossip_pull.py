"""Gossiping SGD, pull variant (Jin et al. 2016, arXiv 1611.04581).

With probability p the initiator i picks a peer j uniformly, fetches x_j and applies

    x_i <- step(x_i) - m_j * (x_i - x_j) / 2

with x_i the pre-step parameters and m_j the mask of what arrived; j does not move.
"""

from __future__ import annotations

import numpy as np

from edgegossip import kernels
from edgegossip.algorithms.base import GossipAlgorithm, World, choose_peers
from edgegossip.dataplane import wire

__all__ = ["choose_peers", "apply", "GossipPull"]


def apply(
    x: np.ndarray, pre: np.ndarray, y: np.ndarray, mask: np.ndarray, chunk_elems: int
) -> None:
    """Initiator only: x (already stepped) -= m * (pre - y) / 2."""
    kernels.elastic_pull(x, pre, y, mask, chunk_elems, 0.5)


class GossipPull(GossipAlgorithm):
    name = "gossip-pull"
    sends_model = True
    protocol = "edgegossip.protocol.gossip_pull:PullProtocol"
    messages = frozenset({wire.MsgType.PARAMS, wire.MsgType.REQUEST})

    @classmethod
    def merge(cls, world: World, picks: list[int | None]) -> None:
        for i, j in enumerate(picks):
            if j is not None:
                world.net.request(i)
                apply(
                    world.xs[i],
                    world.pres[i],
                    world.sent[j],
                    world.net.send(j, world.whole),
                    world.plan.chunk_elems,
                )
