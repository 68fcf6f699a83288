"""What an algorithm is to the rest of edgegossip. Each algorithm is one class in a module of its
own (the rule in the module's docstring) that declares what it needs from the agent (the data
plane, its peers, receive buffers, RPS blocks, a push-sum weight), which settings act under it,
which protocol class drives it over the network, and how one simulated step of W workers runs.
The agent, the simulator, the config and the fleet tooling ask the class and never name an
algorithm: adding one is a new module and one line in algorithms/__init__.py."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan

# The closing phase: the fleet stops training and only agrees, so that each device's own model
# comes to the average. Every worker exchanges at every step (p = 1) by its algorithm's rule;
# Elastic Gossip's at alpha = CLOSING_ALPHA, on parameters no step moves: a pair's exchange
# takes both to their mean.
CLOSING_ALPHA = 0.5

# Receive buffers beyond an exchange's two: nothing is retransmitted, so a round that lost a
# datagram keeps its buffer until its deadline, and with only two the next peer's round found
# none free. On 32 boards sharing a Wi-Fi channel (20 KB model, 10% loss in bursts) 21% of
# the datagrams were dropped so (no_buffer) and two exchanges in five timed out; with six,
# 0.2% and one in forty (docs/results.md). Six for a model up to 1.4 MB, two above 2.8 MB.
RECEIVE_BUFFERS_MB = 8
MAX_RECEIVE_BUFFERS = 6
# An agent's pre-step copies of its parameters, so the exchanges it can have in flight at once:
# one it started and one it answers (Elastic Gossip), or RPS's REDUCE and GATHER. A pick that
# finds either end without a free copy lapses; simulate --merge-delay holds its workers to it.
SNAPSHOTS = 2


@dataclass
class World:
    """The simulated fleet as simulate.py lays it out for an algorithm's sim_step: W workers'
    parameters, optimisers and gradients (computed for this step), their pre-step snapshots and
    what a peer receives of them, and the loss model (net.send(w, chunks) -> mask of what
    arrived, net.request(w), net.bytes_sent)."""

    xs: list[np.ndarray]
    opts: list[Any]
    grads: list[np.ndarray]
    pres: list[np.ndarray]
    sent: list[np.ndarray]  # pres itself, or its encoded and decoded copy
    net: Any
    rng: np.random.Generator  # the peer picks
    plan: ChunkPlan
    wire_copy: Any  # payload.Roundtrip: a vector as the wire delivers it
    p: float
    alpha: float
    avg_grad: np.ndarray
    slices: int = 1  # an Elastic Gossip exchange carries one slice of the model (train.slices)
    weights: list[float] = field(default_factory=list)  # push-sum weights
    # push-sum running sums per link (sender, receiver): (sent, last seen), in counts
    link_sums: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    ring_bytes: float = 0.0  # all-reduce's traffic per worker so far
    carry: list[Any] = field(default_factory=list)  # RPS: each worker's rounding carried forward
    training: bool = True  # False in the closing phase: steps exchange, nobody trains
    # gossip: steps between an exchange's snapshots and its merge (an agent's exchange lands
    # while it trains on), the exchanges on their way: (due step, picks, pres, sent), and each
    # worker's count of them
    delay: int = 0
    pending: deque = field(default_factory=deque)
    in_flight: list[int] = field(default_factory=list)
    lapsed: int = 0  # picks that found an end without a free snapshot
    step: int = 0

    def close(self) -> None:
        """Enter the closing phase (CLOSING_ALPHA above): no more local steps, every worker
        exchanging each step."""
        self.training, self.p, self.alpha = False, 1.0, CLOSING_ALPHA

    @property
    def n(self) -> int:
        return len(self.xs)

    @property
    def whole(self) -> range:
        return range(self.plan.n_chunks)

    def slice_now(self) -> range:
        """The chunks this step's exchanges carry: the whole model, or with slices the slice
        whose turn it is (each in turn, as an agent sends them)."""
        if self.slices == 1:
            return self.whole
        return self.plan.block_chunks(self.step % self.slices, self.slices)

    def local_steps(self) -> None:
        if not self.training:
            return
        for w in range(self.n):
            self.opts[w].step(self.xs[w], self.grads[w])

    def snapshot(self, w: int) -> None:
        """pres[w] <- xs[w] (pre-step), and what a peer will receive of it."""
        np.copyto(self.pres[w], self.xs[w])
        if self.sent is not self.pres:
            self.wire_copy(self.pres[w], self.sent[w])


class Algorithm:
    """The local-only baseline's answers; every algorithm overrides what differs."""

    name: ClassVar[str] = ""
    # config keys (without section) that act only under this algorithm
    settings: ClassVar[tuple[str, ...]] = ()
    # speaks over the UDP data plane (link keys, inbox, sender, snapshots)
    datagrams: ClassVar[bool] = True
    # "all": every other worker, with ids 0..W-1; "some": at least one peer; "none"
    peers: ClassVar[str] = "some"
    # the inbox's shared exchange buffers, at least (receive_buffers_for): one for an exchange
    # we started, one for one we answer; 0: one per RPS block instead
    receive_buffers: ClassVar[int] = 2
    # the message types its protocol collects; the gate refuses every other type, so no
    # sender can hold a receive buffer with a round nothing will ever take
    messages: ClassVar[frozenset[int]] = frozenset({wire.MsgType.PARAMS})
    rps_blocks: ClassVar[bool] = False  # the inbox keeps one buffer per RPS block instead
    push_weight: ClassVar[bool] = False  # a push-sum weight in every header
    # every datagram carries the model itself (a snapshot of it), so a relative payload
    # (delta4) can send its distance from the initial model; sums, blocks and gradients cannot
    sends_model: ClassVar[bool] = False
    whole_gradient: ClassVar[bool] = False  # needs the whole gradient at once (no fused step)
    # the protocol class that drives it on an agent, "module:Class", imported when it runs
    protocol: ClassVar[str] = "edgegossip.protocol.base:Protocol"

    @classmethod
    def receive_buffers_for(cls, n_params: int) -> int:
        """The inbox's shared buffers for a model of n_params: receive_buffers, and more while
        they fit RECEIVE_BUFFERS_MB, up to MAX_RECEIVE_BUFFERS."""
        if not cls.receive_buffers:
            return 0
        fit = RECEIVE_BUFFERS_MB * 2**20 // (4 * n_params)
        return max(cls.receive_buffers, min(MAX_RECEIVE_BUFFERS, fit))

    @classmethod
    def sim_step(cls, world: World) -> None:
        """One simulated step of every worker, after their gradients: plain local SGD."""
        world.local_steps()

    @classmethod
    def sim_bytes_per_worker(cls, world: World) -> float:
        return float(world.net.bytes_sent.mean())

    @classmethod
    def sim_report(cls, world: World) -> dict:
        """What this algorithm adds to a simulation's result."""
        return {}


def choose_peers(workers: int, p: float, rng: np.random.Generator) -> list[int | None]:
    """For each worker, the peer it picks this step, or None (probability 1 - p)."""
    picks: list[int | None] = []
    for i in range(workers):
        if workers > 1 and rng.random() < p:
            j = int(rng.integers(workers - 1))
            picks.append(j + (j >= i))
        else:
            picks.append(None)
    return picks


def _answers(picks: list[int | None], i: int, j: int | None) -> bool:
    """i's pick j is j's own pick of i, seen second: a mutual pick, one exchange."""
    return j is not None and j < i and picks[j] == i


def _admitted(world: World, picks: list[int | None]) -> list[int | None]:
    """The picks whose two ends each have a snapshot free (SNAPSHOTS), counted in flight; the
    others lapse, as on an agent."""
    if not world.in_flight:
        world.in_flight = [0] * world.n
    out: list[int | None] = []
    for i, j in enumerate(picks):
        mutual = _answers(out, i, j)  # one exchange, already counted
        ok = mutual or (j is not None and max(world.in_flight[i], world.in_flight[j]) < SNAPSHOTS)
        if ok and not mutual:
            world.in_flight[i] += 1
            world.in_flight[j] += 1  # type: ignore[index]
        world.lapsed += j is not None and not ok
        out.append(j if ok else None)
    return out


class GossipAlgorithm(Algorithm):
    """Gossip: with probability p per step a worker picks one peer; the pickers' and the picked
    workers' pre-step parameters are snapshotted, every worker steps, then merge() applies."""

    settings: ClassVar[tuple[str, ...]] = ("p",)
    protocol = ""

    @classmethod
    def sim_step(cls, world: World) -> None:
        picks = choose_peers(world.n, world.p, world.rng)
        if world.delay:
            picks = _admitted(world, picks)
        involved = {w for w, j in enumerate(picks) if j is not None} | {
            j for j in picks if j is not None
        }
        for w in involved:
            world.snapshot(w)
        world.local_steps()
        world.step += 1
        if not world.delay:
            cls.merge(world, picks)
            return
        # the snapshots as they were, merged world.delay steps on into what the workers are then
        if not involved:
            return cls._land(world)
        pres: list = [None] * world.n
        sent: list = [None] * world.n
        for w in involved:
            pres[w] = world.pres[w].copy()
            sent[w] = pres[w] if world.sent is world.pres else world.sent[w].copy()
        world.pending.append((world.step + world.delay, picks, pres, sent))
        cls._land(world)

    @classmethod
    def _land(cls, world: World) -> None:
        """Merge the exchanges due by now, each against its start's snapshots."""
        while world.pending and world.pending[0][0] <= world.step:
            _, late, pres, sent = world.pending.popleft()
            cls.merge(replace(world, pres=pres, sent=sent), late)
            for i, j in enumerate(late):
                if j is not None and not _answers(late, i, j):
                    world.in_flight[i] -= 1
                    world.in_flight[j] -= 1

    @classmethod
    def merge(cls, world: World, picks: list[int | None]) -> None:
        raise NotImplementedError
