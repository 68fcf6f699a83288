"""How an agent drives each algorithm over the network, without a global barrier: who sends
what, when, and when an exchange is over. The math itself lives in edgegossip/algorithms, and
each algorithm's class there names the protocol class that drives it."""

from __future__ import annotations

import importlib

from edgegossip import algorithms
from edgegossip.protocol.base import Context, Protocol


def make_protocol(ctx: Context) -> Protocol:
    module, _, name = algorithms.get(ctx.cfg.algorithm).protocol.partition(":")
    return getattr(importlib.import_module(module), name)(ctx)


__all__ = ["Context", "Protocol", "make_protocol"]
