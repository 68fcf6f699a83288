"""How an agent drives each algorithm over the network, without a global barrier: who sends
what, when, and when an exchange is over. The math itself lives in edgegossip/algorithms."""

from __future__ import annotations

from edgegossip.protocol.base import Context, Protocol


def make_protocol(ctx: Context) -> Protocol:
    name = ctx.cfg.algorithm
    if name in ("elastic-gossip", "gossip-pull", "gossip-push"):
        from edgegossip.protocol.gossip import GossipProtocol
        return GossipProtocol(ctx)
    if name == "rps":
        from edgegossip.protocol.rps import RpsProtocol
        return RpsProtocol(ctx)
    if name == "allreduce":
        from edgegossip.protocol.allreduce import RingAllReduce
        return RingAllReduce(ctx)
    return Protocol(ctx)  # local: no communication
