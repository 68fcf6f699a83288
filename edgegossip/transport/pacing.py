"""Token-bucket pacing: a sender spreads its datagrams at a set byte rate so it never overruns
its own socket buffer, the link or the receiver. Loss is what the network does, not what we do."""

from __future__ import annotations

import time

# At most this much leaves back to back: the zmq transport's DISH keeps the kernel's default
# receive buffer (212 KB; libzmq ignores ZMQ_RCVBUF on UDP), and a receiver busy training must
# hold a whole burst there
MAX_BURST_BYTES = 64 << 10


# How often a paced sender wakes: 10 ms is 22 KB at 18 Mbit/s a wake-up. 2 ms woke the sender for
# every third datagram and cost it 2.4x the CPU. In interleaved int8 fleets (docs/changelog.md, "The
# pacer's burst"), 5 ms cost 22% more data-plane CPU and 20 ms 20% less, and both made fewer steps
# than 10 ms: a longer burst saves the sender's wake-ups but costs the training more than it saves.
# Faster links: MAX_BURST_BYTES. The emulated links' bucket (emulate/netns.py) and the receiver's
# longest pause (transport/udp.py, four bursts) follow it.
BURST_S = 0.010

# What a datagram adds on the link beyond its UDP payload: IPv4 20, UDP 8, Ethernet 14 bytes. The
# rate is the link's, so the pacer books whole frames: booking payload alone sent 3% above a cap of
# the same rate (1.4 KB datagrams), and the emulator's tbf then held a queue that its timer drained
# in softirqs charged to whatever ran, mostly training threads (docs/changelog.md, bench overhead).
WIRE_OVERHEAD = 42

# A wait shorter than this is not slept (the burst absorbs it), so a burst may leave this much
# early: what a cap of exactly the rate must hold beyond BURST_S (native/_sendrows.pxi: the same)
EARLY_S = 0.0005


class Pacer:
    def __init__(self, rate_bytes_per_s: float | None, burst_s: float = BURST_S):
        self._burst_s = burst_s
        self.set_rate(rate_bytes_per_s)
        self.next_at = time.perf_counter()

    def set_rate(self, rate_bytes_per_s: float | None) -> None:
        """Pace what is booked from now on at this rate (None or 0: unpaced)."""
        self.rate = rate_bytes_per_s if rate_bytes_per_s and rate_bytes_per_s > 0 else None
        burst = self._burst_s
        self.burst_s = min(burst, MAX_BURST_BYTES / self.rate) if self.rate else burst

    def datagrams_per_burst(self, datagram_bytes: int, most: int = 64) -> int:
        """How many datagrams may leave back to back without exceeding the burst allowance."""
        if self.rate is None:
            return most
        frame = datagram_bytes + WIRE_OVERHEAD
        return max(1, min(most, int(self.rate * self.burst_s // frame)))

    def reserve(self, nbytes: int, datagrams: int = 1) -> float:
        """Book `datagrams` datagrams of nbytes in all (UDP payload) at the configured rate, as
        the frames they make: the seconds to wait before they leave (0 when the gap is too small
        to sleep for: the burst absorbs it)."""
        if self.rate is None:
            return 0.0
        now = time.perf_counter()
        if self.next_at < now - self.burst_s:  # idle: do not save up an unbounded burst
            self.next_at = now - self.burst_s
        self.next_at += (nbytes + WIRE_OVERHEAD * datagrams) / self.rate
        ahead = self.next_at - now
        return ahead if ahead > EARLY_S else 0.0

    def wait(self, nbytes: int) -> None:
        """Block until one datagram of nbytes may leave at the configured rate."""
        ahead = self.reserve(nbytes)
        if ahead:
            time.sleep(ahead)
