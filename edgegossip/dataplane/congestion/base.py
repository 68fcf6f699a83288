"""The rate controller the sender asks: one object a device, fed events (what was sent to a peer
and when; what that peer's receiver reported), that answers one question, how fast may I send
to this peer now. Each algorithm is a subclass in a module of its own, registered by name
(`net.congestion`); the sender never computes a rate itself.

Rates are kept per link, and each link moves only on its own receiver's reports: on a shared
channel congestion shows on every link, so every link backs off; a compromised device that
reports falsely can slow only the link to itself (docs/security.md). Thread-safe: the sender
thread reports sends and asks rates, the receive thread hands in reports.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from edgegossip.dataplane.congestion.signal import LinkSignal, Report, Sample

# A receiver reports each incoming link this often while it carries chunks. A sender changes
# its pace between slices of this length (dataplane/sender.py), so a round of a large model
# that takes minutes on a shared channel is steered while it is sent, not after.
FEEDBACK_S = 0.2
FLOOR = 1 / 64  # no link is paced below this share of the cap: its reports must keep coming


class Link:
    """One outgoing link: its rate, what its reports said, and when it last backed off."""

    def __init__(self, rate: float):
        self.rate = rate
        self.signal = LinkSignal()
        self.hold_until = 0.0  # no second decrease before the queue of the first has drained
        self.last_report = 0.0
        self.congested = 0  # intervals judged congested


class Controller(ABC):
    """Per-link send rates in bytes a second (frames, as the pacer books them), at most `cap`;
    None where cap is None (unpaced)."""

    name: ClassVar[str]

    def __init__(self, cap: float | None):
        self.cap = cap if cap and cap > 0 else None
        self.session = 0  # ours: a report about another session is not about these sends
        self._links: dict[int, Link] = {}
        self._lock = threading.Lock()

    def _link(self, peer: int) -> Link:
        link = self._links.get(peer)
        if link is None:
            link = self._links[peer] = Link(self._start_rate())
        return link

    def rate(self, peer: int) -> float | None:
        """The pace for what is sent to peer next."""
        if self.cap is None:
            return None
        with self._lock:
            return self._link(peer).rate

    def device_rate(self) -> float | None:
        """What this device may send at, all links together: the mean of its links' rates
        (the cap's starting share before any link is known)."""
        if self.cap is None:
            return None
        with self._lock:
            rates = [link.rate for link in self._links.values()]
        return sum(rates) / len(rates) if rates else self._start_rate()

    def sent(self, peer: int, first: int, last: int, t_first: float, t_last: float) -> None:
        """Sequence numbers first .. last left for peer between t_first and t_last."""
        with self._lock:
            self._link(peer).signal.sends.add(first, last, t_first, t_last)

    def report(self, peer: int, report: Report, now: float | None = None) -> Sample | None:
        """peer's receiver reported on our link to it; the rate moves by the algorithm."""
        if report.session != self.session:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            link = self._link(peer)
            sample = link.signal.measure(report, now)
            if sample is None:
                return None
            dt = min(now - link.last_report, 4 * FEEDBACK_S) if link.last_report else FEEDBACK_S
            link.last_report = now
            link.congested += sample.congested
            if self.cap is not None:
                link.rate = min(self.cap, max(self._floor(), self._next(link, sample, dt, now)))
        return sample

    def _floor(self) -> float:
        assert self.cap is not None
        return self.cap * FLOOR

    def _start_rate(self) -> float:
        """A new link's first pace (0 where unpaced: the rate is then never asked)."""
        return self.cap or 0.0

    @abstractmethod
    def _next(self, link: Link, sample: Sample, dt: float, now: float) -> float:
        """Link's rate after an interval of dt seconds that showed sample."""

    def metrics(self) -> dict:
        """Each link's pace, queueing delay and congested intervals (catalog.py)."""
        with self._lock:
            links = sorted(self._links.items())
            congested = {str(j): link.congested for j, link in links}
            out: dict = {
                "link_rate_mbps": {
                    str(j): round(link.rate * 8e-6, 3) for j, link in links if self.cap
                },
                "link_queue_delay_ms": {
                    str(j): round(link.signal.queue_delay_s * 1e3, 1) for j, link in links
                },
                "link_congested": congested,
                "congested_intervals": sum(congested.values()),
            }
        rate = self.device_rate()
        out["send_rate_mbps"] = None if rate is None else round(rate * 8e-6, 3)
        return out


CONTROLLERS: dict[str, Callable[[float | None], Controller]] = {}


def register(cls: type[Controller]) -> type[Controller]:
    """A class decorator: the algorithm under its name."""
    CONTROLLERS[cls.name] = cls
    return cls
