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

    def advance(self, seqs) -> None:
        """Record a rising run of sequence numbers, all above highest (what check() would do for
        each of them in turn, in one update: the receive fast path accepts such runs)."""
        k = len(seqs)
        if not k:
            return
        last = int(seqs[k - 1])
        if last - int(seqs[0]) == k - 1:  # consecutive, the usual case
            run = (1 << min(k, WINDOW)) - 1
        else:
            run = 0
            for s in seqs:
                back = last - int(s)
                if back < WINDOW:
                    run |= 1 << back
        shift = last - self.highest
        self.bits = (((self.bits << shift) & _MASK) if shift < WINDOW else 0) | run
        self.highest = last


_MASK = (1 << WINDOW) - 1
