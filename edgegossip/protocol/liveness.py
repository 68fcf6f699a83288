"""Which peers are there, and whether this worker still mixes: what a gossip protocol knows of a
peer is the rounds that come from it.

A peer is heard whenever one of its rounds arrives. With probability p per step it starts an
exchange with one of its W-1 peers, so rounds from it come about every

    g = (W - 1) / p steps

of ours (at our own mean step time) or at the gap seen on that link, whichever is longer. Peer
j is silent once nothing has come from it for

    silent_after_j = max(SILENT_GAPS * g_j, SILENT_DEADLINES * d_j)

(d_j its exchange deadline, deadlines.py), counted from the last time it was heard, or from the
start for a peer never heard. A live peer stays quiet that long with probability about
exp(-SILENT_GAPS) (0.25%): such a mistake only delays what the algorithm gives it until its next
round.

Alarms, each logged once when it begins and once when it ends:
- merges_stopped: no exchange merged for 2 * max(silent_after) while some peer is heard: the
  fleet is alive but this worker has stopped mixing (no buffer, every round refused, all
  weight lost);
- an algorithm's own (gossip-push: weight_below_floor).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from edgegossip.metrics import ALARMS

log = logging.getLogger(__name__)

SILENT_GAPS = 6.0
SILENT_DEADLINES = 2.0
GAP_EMA = 0.2  # weight of the newest gap in the running mean of a link's gaps
STALL_FACTOR = 2.0  # merges_stopped after this many times the longest silent_after
CHECK_EVERY_S = 0.5
__all__ = ["ALARMS", "Liveness"]


class Liveness:
    def __init__(
        self, peers: list[int], workers: int, p: float, deadline_s: Callable[[int], float]
    ):
        self.peers = list(peers)
        self.p = p
        self.draw_gap_steps = max(1, workers - 1) / max(p, 1e-9)
        self.deadline_s = deadline_s
        self.t0: float | None = None
        self.last_step: float | None = None
        self.step_s = 0.0  # running mean of our step time
        self.last_heard: dict[int, float] = {}
        self.gap_s: dict[int, float] = {}  # running mean of the gaps between a peer's rounds
        self.last_merge: float | None = None
        self.silent: set[int] = set()
        self.alarms: set[str] = set()
        self.last_check = float("-inf")
        self.added: dict[int, float] = {}  # peers added while running: when

    def set_peers(self, peers: list[int], workers: int, now: float) -> None:
        """Another set of peers: a new one's silence counts from now, a removed one's record
        goes."""
        for j in set(self.peers) - set(peers):
            for record in (self.last_heard, self.gap_s, self.added):
                record.pop(j, None)
            self.silent.discard(j)
        for j in set(peers) - set(self.peers):
            self.added[j] = now
        self.peers = list(peers)
        self.draw_gap_steps = max(1, workers - 1) / max(self.p, 1e-9)

    def step(self, now: float) -> None:
        """Called at every training step: our step time, which scales the expected gaps."""
        if self.t0 is None:
            self.t0 = self.last_merge = now
        elif self.last_step is not None:
            dt = now - self.last_step
            self.step_s = dt if self.step_s == 0 else self.step_s + GAP_EMA * (dt - self.step_s)
        self.last_step = now

    def heard(self, peer: int, now: float) -> None:
        last = self.last_heard.get(peer)
        if last is not None:
            gap = now - last
            mean = self.gap_s.get(peer)
            self.gap_s[peer] = gap if mean is None else mean + GAP_EMA * (gap - mean)
        self.last_heard[peer] = now
        if peer in self.silent:
            self.silent.discard(peer)
            since = now - (last if last is not None else self._t0())
            log.info("peer %d heard again after %.0f s of silence", peer, since)

    def merged(self, now: float) -> None:
        self.last_merge = now

    def silent_after(self, peer: int) -> float:
        expected = self.draw_gap_steps * self.step_s
        gap = max(expected, self.gap_s.get(peer, 0.0))
        return max(SILENT_GAPS * gap, SILENT_DEADLINES * self.deadline_s(peer))

    def is_live(self, peer: int, now: float) -> bool:
        """Heard, and not silent since: a peer worth giving to."""
        last = self.last_heard.get(peer)
        return last is not None and now - last <= self.silent_after(peer)

    def due(self, now: float) -> bool:
        """Whether check() is worth running now (at most every CHECK_EVERY_S)."""
        if now - self.last_check < CHECK_EVERY_S:
            return False
        self.last_check = now
        return True

    def check(self, now: float, own_alarms: set[str]) -> None:
        """Update the silent peers and the alarms; log what began and what ended."""
        for j in self.peers:
            quiet = now - self.last_heard.get(j, self.added.get(j, self._t0()))
            if j not in self.silent and quiet > self.silent_after(j):
                self.silent.add(j)
                log.warning(
                    "peer %d silent for %.0f s: it gets nothing but probes until it is heard",
                    j,
                    quiet,
                )
        live = [j for j in self.peers if j not in self.silent and j in self.last_heard]
        alarms = set(own_alarms)
        if live:
            window = STALL_FACTOR * max(self.silent_after(j) for j in live)
            if now - (self.last_merge or self._t0()) > window:
                alarms.add("merges_stopped")
        for a in sorted(alarms - self.alarms):
            log.warning("alarm %s: %s", a, self._why(a, now, live))
        for a in sorted(self.alarms - alarms):
            log.info("alarm %s ended", a)
        self.alarms = alarms

    def _why(self, alarm: str, now: float, live: list[int]) -> str:
        if alarm == "merges_stopped":
            quiet = now - (self.last_merge or self._t0())
            return f"nothing merged for {quiet:.0f} s while peers {live} are heard"
        return "see the metrics record"

    def _t0(self) -> float:
        return self.t0 if self.t0 is not None else 0.0

    def metrics(self) -> dict:
        return {"silent_peers": sorted(self.silent), "alarms": sorted(self.alarms)}
