"""One module per algorithm; each states its rule in its docstring, applies it to flat float32
vectors through the kernels (one mask byte per chunk saying which datagrams arrived), and holds
the class that tells the rest of edgegossip what the algorithm needs (base.py). This registry is
the one list of them."""

from __future__ import annotations

from edgegossip.algorithms.allreduce import AllReduce
from edgegossip.algorithms.base import Algorithm, World
from edgegossip.algorithms.elastic_gossip import ElasticGossip
from edgegossip.algorithms.gossip_pull import GossipPull
from edgegossip.algorithms.gossip_push import GossipPush
from edgegossip.algorithms.local import Local
from edgegossip.algorithms.rps import Rps

REGISTRY: dict[str, type[Algorithm]] = {
    a.name: a for a in (ElasticGossip, GossipPull, GossipPush, Rps, AllReduce, Local)
}
NAMES = tuple(REGISTRY)
DEFAULT = ElasticGossip.name


def get(name: str) -> type[Algorithm]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {', '.join(NAMES)}") from None


def acting(setting: str) -> tuple[str, ...]:
    """The algorithms under which a setting acts; every one, unless some algorithm claims it."""
    claimed = [a.name for a in REGISTRY.values() if setting in a.settings]
    return tuple(claimed) if claimed else NAMES


__all__ = ["Algorithm", "World", "REGISTRY", "NAMES", "DEFAULT", "get", "acting"]
