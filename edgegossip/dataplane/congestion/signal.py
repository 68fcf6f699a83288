"""What a link's receiver reports, and what a sender reads in it: how long its datagrams waited
in a queue on the way, and whether the link lost more of them than it loses at random.

Wi-Fi loses frames at random, and that is no reason to send slower; a queue that grows, and the
drops of a full one, are. The two are told apart by the one-way delay: random loss comes at a
steady delay, congestion with a growing one (LEDBAT, RFC 6817 §2.4). No board has a real-time
clock, so the delay is measured as LEDBAT does, without synchronised clocks: a report's
arrival time on the receiver's clock minus the send time on ours is the one-way delay plus a
constant offset, and its least over the last minutes (the base delay) is that offset plus the
empty path; what a sample has above the base is the time it queued. Both times are taken by
threads that share a small board's CPU with training, which holds them back now and then: a
sample's delay is the least of the last few (CURRENT_FILTER), so only a queue that stays counts.
Loss beyond the link's random loss (learnt at an empty queue) by more than chance explains is
congestion too, when it repeats in the next interval.

A report is cumulative (the highest sequence number that arrived, and how many arrived since
the session's first), so a lost report costs a sample and nothing else.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

# Queueing delay above this through CURRENT_FILTER reports running is congestion. LEDBAT's TARGET
# is at most 100 ms (RFC 6817 §3.2); a receive thread's batching adds up to 40 ms (transport/udp.py,
# LINGER_MAX_S) to when a datagram is seen, and an access point's queue holds 50 ms at the
# channel's full rate (emulate/netns.py, QUEUE_S) and several times that at one station's share
TARGET_S = 0.1
# A sample's queueing delay is the least of this many reports' (RFC 6817's CURRENT_FILTER): a
# receive or send thread held back by training on a small board's CPU, or by an emulated
# board's quota (100-250 ms on `emulate --devices`, without a frame dropped), is late now and
# then; a queue is late at every report. Two reports are 0.4 s: four (and an increase blind to
# the delay) let eight MLP agents on one 4 Mbit/s channel overfill it (19% of the frames
# dropped, against 1.5%: aimd.py)
CURRENT_FILTER = 2
# The base delay is the least over this many one-minute buckets (RFC 6817's BASE_HISTORY)
BASE_HISTORY = 10
BASE_BUCKET_S = 60.0
# Loss over an interval is judged against the link's random loss only over this many datagrams,
# and is congestion when two intervals running exceed it by this much or three standard errors
MIN_DATAGRAMS = 16
LOSS_MARGIN = 0.1
LOSS_EWMA = 0.1  # weight of an interval without excess loss in the random-loss estimate
LOSS_LEARNT = 256  # datagrams of uncongested intervals before that estimate is trusted
SENDS_KEPT = 512  # runs of sequence numbers whose send times a link keeps


@dataclass(frozen=True)
class Report:
    """A receiver's word on the link from one sender, in that sender's session `session`: the
    highest sequence number that arrived, when it did (the receiver's monotonic clock), and how
    many arrived from sequence number `first` on (wire.FEEDBACK)."""

    session: int
    highest: int
    first: int
    arrived: int
    at: float


@dataclass(frozen=True)
class Sample:
    """One interval between two reports of a link: its queueing delay (s), its loss (None
    when too few datagrams to tell), and whether it was congested."""

    queue_delay_s: float
    loss: float | None
    congested: bool


class Sends:
    """When each sequence number left: runs (first seq, last seq, first time, last time), the
    datagrams between spread evenly over the run's time, as the pacer spreads them."""

    def __init__(self) -> None:
        self._runs: deque[tuple[int, int, float, float]] = deque(maxlen=SENDS_KEPT)

    def add(self, first: int, last: int, t_first: float, t_last: float) -> None:
        if last >= first:
            self._runs.append((first, last, t_first, t_last))

    def at(self, seq: int) -> float | None:
        """When seq left, if a kept run holds it."""
        for first, last, t0, t1 in reversed(self._runs):
            if first <= seq <= last:
                return t0 if last == first else t0 + (t1 - t0) * (seq - first) / (last - first)
            if last < seq:
                return None  # runs only grow: no earlier one holds it
        return None


class BaseDelay:
    """The least one-way delay (plus the clocks' offset) over BASE_HISTORY buckets of
    BASE_BUCKET_S, as RFC 6817 §3.4.2 keeps it."""

    def __init__(self) -> None:
        self._buckets: deque[tuple[float, float]] = deque(maxlen=BASE_HISTORY)  # (start, min)

    def update(self, delay: float, now: float) -> float:
        if self._buckets and now - self._buckets[-1][0] < BASE_BUCKET_S:
            start, least = self._buckets[-1]
            self._buckets[-1] = (start, min(least, delay))
        else:
            self._buckets.append((now, delay))
        return min(least for _, least in self._buckets)


class LinkSignal:
    """What one link's reports say, interval by interval."""

    def __init__(self) -> None:
        self.sends = Sends()
        self.base = BaseDelay()
        self.last: Report | None = None
        self.random_loss: float | None = None  # the loss of its uncongested intervals
        self.random_seen = 0  # datagrams that estimate rests on
        self.excess = False  # the last interval lost more than the random loss explains
        self.recent: deque[float] = deque(maxlen=CURRENT_FILTER)  # the last samples' delays
        self.queue_delay_s = 0.0  # the least of them
        self.loss: float | None = None

    def measure(self, report: Report, now: float) -> Sample | None:
        """The interval since the last report, or None when nothing in it can be measured
        (the report is older than the last, or names a datagram whose send time is gone)."""
        last = self.last
        if last is not None and last.session == report.session and report.highest <= last.highest:
            return None  # reordered or repeated: nothing new
        self.last = report
        sent = self.sends.at(report.highest)
        if sent is None:
            return None
        delay = report.at - sent
        self.recent.append(max(0.0, delay - self.base.update(delay, now)))
        self.queue_delay_s = min(self.recent)
        self.loss = self._loss(last, report)
        # a queue over its target through CURRENT_FILTER reports, or loss beyond the random
        # loss twice running (a full queue persists where chance seldom repeats itself)
        excess = self._excess(self.loss, report, last)
        congested = self.queue_delay_s > TARGET_S or (excess and self.excess)
        self.excess = excess
        # learnt only at an empty queue: a queue's loss grows by less than the margin an
        # interval as the stations speed up, and learnt there (even at a twentieth of the
        # weight) it became the "random" loss: 0.14 for 0.05 on a fluid channel of 8 stations
        if (
            self.loss is not None
            and not excess
            and last is not None
            and self.queue_delay_s < TARGET_S / 2
        ):
            r = self.random_loss
            self.random_loss = self.loss if r is None else r + LOSS_EWMA * (self.loss - r)
            self.random_seen += report.highest - last.highest
        return Sample(self.queue_delay_s, self.loss, congested)

    @staticmethod
    def _loss(last: Report | None, report: Report) -> float | None:
        if last is None or last.session != report.session or last.first != report.first:
            return None
        numbered = report.highest - last.highest
        if numbered < MIN_DATAGRAMS:
            return None
        return min(1.0, max(0.0, 1.0 - (report.arrived - last.arrived) / numbered))

    def _excess(self, loss: float | None, report: Report, last: Report | None) -> bool:
        """Loss beyond what the link loses at random, by more than chance explains."""
        base = self.random_loss
        if loss is None or base is None or last is None or self.random_seen < LOSS_LEARNT:
            return False
        n = report.highest - last.highest
        return loss > base + max(LOSS_MARGIN, 3 * math.sqrt(base * (1 - base) / n))
