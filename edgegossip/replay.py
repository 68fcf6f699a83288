"""Per-sender replay protection: a sliding window over datagram sequence numbers (as IPsec's).

A sequence number is accepted once. One within WINDOW below the highest seen is accepted if it was
not seen (UDP may reorder); one further below is stale. Senders start their sequence at the
microsecond wall clock, so a restarted agent's numbers are above those it used before the crash.
"""

from __future__ import annotations

WINDOW = 4096


class ReplayWindow:
    __slots__ = ("highest", "bits")

    def __init__(self) -> None:
        self.highest = -1
        self.bits = 0  # bit k set: highest - k was seen

    def check(self, seq: int) -> str | None:
        """Record seq; return None if fresh, else the drop reason."""
        if seq > self.highest:
            shift = seq - self.highest
            self.bits = ((self.bits << shift) | 1) & _MASK if shift < WINDOW else 1
            self.highest = seq
            return None
        back = self.highest - seq
        if back >= WINDOW:
            return "stale"
        bit = 1 << back
        if self.bits & bit:
            return "replayed"
        self.bits |= bit
        return None


_MASK = (1 << WINDOW) - 1
