"""How long an exchange waits for the peer's parameters, per link.

A fleet mixes fast and slow links, so one fixed deadline is either too long for the fast ones (a
lost last datagram keeps the exchange open until it passes) or too short for the slow ones (their
replies never complete). `net.deadline`:

- fixed:    every exchange waits at most net.deadline_s.
- adaptive: the exchange with peer j waits at most

                d_j = clamp(MARGIN * q90(T_j) + SETTLE_S, net.deadline_min_s, net.deadline_max_s)

            where T_j holds the last WINDOW transfer times seen on that link: from the moment
            the exchange began to the arrival of the peer's last datagram of it. Until
            MIN_SAMPLES are known, d_j = net.deadline_s (the configured value is the first guess).
            A transfer its deadline cut off (datagrams still arriving within SETTLE_S of it) is
            longer than what was seen, so it enters T_j as GROWTH * d_j: a link that slows down
            gets a longer deadline within a few exchanges instead of being cut off forever. An
            exchange where nothing arrived tells nothing about the link (the peer was busy with
            other exchanges, is switched off, or our request was lost) and is not counted."""

from __future__ import annotations

from collections import deque

WINDOW = 16
MIN_SAMPLES = 3
MARGIN = 1.5
GROWTH = 2.0
QUANTILE = 0.9


class Deadlines:
    def __init__(self, mode: str, initial_s: float, min_s: float, max_s: float, settle_s: float):
        self.adaptive = mode == "adaptive"
        self.initial_s, self.min_s, self.max_s, self.settle_s = initial_s, min_s, max_s, settle_s
        self._seen: dict[int, deque[float]] = {}

    def for_peer(self, peer: int) -> float:
        seen = self._seen.get(peer)
        if not self.adaptive or seen is None or len(seen) < MIN_SAMPLES:
            return self.initial_s
        ordered = sorted(seen)
        q = ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]
        return min(self.max_s, max(self.min_s, MARGIN * q + self.settle_s))

    def observe(
        self, peer: int, started: float, last_arrival: float | None, deadline: float, complete: bool
    ) -> None:
        """One exchange with peer ended: it began at `started`, its last datagram came at
        `last_arrival` (None: nothing came), and it was to end by `deadline`."""
        if not self.adaptive or last_arrival is None:
            return
        if not complete and deadline - last_arrival < self.settle_s:
            value = GROWTH * (deadline - started)  # cut off while the datagrams were still coming
        else:
            value = max(0.0, last_arrival - started)
        self._seen.setdefault(peer, deque(maxlen=WINDOW)).append(value)

    def snapshot(self) -> dict[str, float]:
        """Each link's current deadline, for metrics."""
        return {str(p): round(self.for_peer(p), 3) for p in sorted(self._seen)}
