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
ATTACKS = tuple(name for name, make in attack.ATTACKS.items() if make is not None)


class Hostile:
    def __init__(self, kind: str, ports: list[int], me: int, fleet: int, key: bytes, n_params: int):
        codec = payload.codec("int8")
        self.plan = codec.plan(n_params, wire.default_chunk_bytes())
        spec = PlaneSpec(kind, ("127.0.0.1", ports[me]), fleet, me, 20e6, session=7)
        self.plane = DataPlane(spec, self.plan, key, codec)
        self.dest = {i: ("127.0.0.1", p) for i, p in enumerate(ports) if i != me}
        self.round = 0
        # what an agent's attack keeps (the honest models it heard, the first of them) and
        # makes, as emulate --hostile's agents do; attack() sets what it makes
        self.state = attack.Attack("none")
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
                    self.state.heard(y)

    def attack(self, name: str, victims: list[int], seconds: float, every_s: float = 0.05) -> int:
        """Send what attack `name` makes of the honest models heard to the victims in turn
        every every_s for `seconds`; the rounds sent. Call it once one has been heard (honest
        agents start exchanges with this device too: harvest() keeps what they carry)."""
        assert self.state.first is not None, "no honest model heard yet"
        self.state.make = attack.ATTACKS[name]
        sent, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            self.harvest()
            y = self.state.seen[-1].copy()  # its own model: the last it heard
            self.state.apply(y)
            self.send(victims[sent % len(victims)], y)
            sent += 1
            time.sleep(every_s)
        return sent

    def close(self) -> None:
        self.plane.close()
