"""A device of the fleet in an attacker's hands (issue 67): its keys (here the fleet's secret),
its own id and session, a real data plane on loopback. It starts Elastic Gossip exchanges with
honest agents (PARAMS flagged REPLY, as any exchange starts), keeps the pre-step parameters they
answer with (what its own links carry to it), and sends what an attack makes of them: the
published attacks on robust aggregation (algorithms/attack.py), from the honest models it has
seen."""

from __future__ import annotations

import time

import numpy as np

from edgegossip.algorithms import attack
from edgegossip.dataplane import payload, wire
from edgegossip.dataplane.plane import DataPlane, PlaneSpec

# what travels on the wire: flip-labels is an agent's own training (emulate --hostile)
ATTACKS = {name: make for name, make in attack.ATTACKS.items() if make is not None}


class Hostile:
    def __init__(self, kind: str, ports: list[int], me: int, fleet: int, key: bytes, n_params: int):
        codec = payload.codec("int8")
        self.plan = codec.plan(n_params, wire.default_chunk_bytes())
        spec = PlaneSpec(kind, ("127.0.0.1", ports[me]), fleet, me, 20e6, session=7)
        self.plane = DataPlane(spec, self.plan, key, codec)
        self.dest = {i: ("127.0.0.1", p) for i, p in enumerate(ports) if i != me}
        self.round = 0
        self.seen: list[np.ndarray] = []  # honest models, in the order they came
        self.first: np.ndarray | None = None
        self._want: dict[int, int] = {}  # peer -> the round of its answer we wait for

    def send(self, i: int, y: np.ndarray) -> None:
        """Start an exchange with i carrying y."""
        self.round += 1
        for d in self.plane.encoder.chunks(
            y, wire.MsgType.PARAMS, self.round, flags=wire.FLAG_REPLY, receiver=i
        ):
            self.plane.transport.send(self.dest[i], d)

    def harvest(self) -> None:
        """Keep the answers that have arrived whole: the honest models."""
        rounds = self.plane.inbox.rounds
        for ev in rounds.events():
            if ev.msg_type == wire.MsgType.PARAMS:
                self._want[ev.sender] = ev.round
        for peer, rnd in list(self._want.items()):
            if rounds.ready(peer, wire.MsgType.PARAMS, rnd, 0.3):
                y = np.empty(self.plan.n_params, np.float32)
                mask = np.zeros(self.plan.n_chunks, np.uint8)
                got = rounds.collect(peer, wire.MsgType.PARAMS, rnd, 0.0, y, mask)
                del self._want[peer]
                if got == self.plan.n_chunks:
                    self.seen.append(y)
                    self.first = y if self.first is None else self.first

    def attack(self, make, victims: list[int], seconds: float, every_s: float = 0.05) -> int:
        """Send make(the last honest model, those seen, the first) to the victims in turn every
        every_s for `seconds`; the rounds sent. Call it once seen is not empty (honest agents start
        exchanges with this device too: harvest() keeps what they carry)."""
        assert self.first is not None, "no honest model seen yet"
        sent, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            self.harvest()
            last = self.seen[-1]
            self.send(victims[sent % len(victims)], make(last, self.seen[-4:], self.first))
            sent += 1
            time.sleep(every_s)
        return sent

    def close(self) -> None:
        self.plane.close()
