"""What every protocol gets (Context) and the hooks the agent calls around each local step."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from edgegossip.config import AgentConfig
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.reassembly import Reassembly
from edgegossip.dataplane.sender import Sender, Snapshots
from edgegossip.models.optim import NesterovSGD
from edgegossip.transport.base import Endpoint


@dataclass
class Context:
    cfg: AgentConfig
    plan: ChunkPlan
    rounds: Reassembly | None  # the inbox's receive buffers
    sender: Sender | None
    peers: dict[int, Endpoint]
    rng: np.random.Generator
    snapshots: Snapshots | None = None  # the parameter copies the protocol and sender share
    exchanges: Counter = field(default_factory=Counter)  # completed / partial / timed_out / skipped
    stop: threading.Event = field(default_factory=threading.Event)  # set by SIGTERM / SIGINT
    push_weight: float = 1.0  # this worker's push-sum weight (gossip-push checkpoints it)


class Stopped(Exception):
    """A blocking protocol step gave up because the agent is stopping."""


class Protocol:
    """The local-only protocol; the others override the hooks they need."""

    # the settings it takes without a restart (agent/reload.py); none: a restart for any
    live_settings: frozenset[str] = frozenset()

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def peers_changed(self) -> None:
        """ctx.peers and ctx.cfg now name another set of peers (only if live_settings)."""

    # the data plane's parts, for the protocols of algorithms that have one (Algorithm.datagrams)
    @property
    def rounds(self) -> Reassembly:
        assert self.ctx.rounds is not None, "this algorithm has no data plane"
        return self.ctx.rounds

    @property
    def sender(self) -> Sender:
        assert self.ctx.sender is not None, "this algorithm has no data plane"
        return self.ctx.sender

    @property
    def snapshots(self) -> Snapshots:
        assert self.ctx.snapshots is not None, "this algorithm has no data plane"
        return self.ctx.snapshots

    def before_step(self, x: np.ndarray, step: int) -> None:
        """Start exchanges and answer peers, with x still pre-step."""

    def step(self, x: np.ndarray, g: np.ndarray, opt: NesterovSGD) -> None:
        opt.step(x, g)

    def after_step(self, x: np.ndarray, step: int) -> None:
        """Apply exchanges whose data arrived or whose deadline passed."""

    def record(self, mask: np.ndarray | None, arrived: int, expected: int) -> None:
        if arrived == 0:
            self.ctx.exchanges["timed_out"] += 1
        elif arrived >= expected:
            self.ctx.exchanges["completed"] += 1
        else:
            self.ctx.exchanges["partial"] += 1

    def metrics(self) -> dict:
        """What this protocol adds to each metrics record."""
        return {}

    def checkpoint(self) -> dict[str, np.ndarray]:
        """The protocol's own state a restart must keep, saved beside the parameters."""
        return {}

    def restore(self, state: dict[str, np.ndarray]) -> None:
        """Take back what checkpoint() saved (an empty dict on a fresh start)."""

    def close(self) -> None:
        pass
