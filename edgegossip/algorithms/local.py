"""Local only: each worker trains on its own shard and never communicates, x_i <- step(x_i).
The lower bound the gossip algorithms must beat."""

from __future__ import annotations

from edgegossip.algorithms.base import Algorithm


class Local(Algorithm):
    name = "local"
    datagrams = False
    peers = "none"
