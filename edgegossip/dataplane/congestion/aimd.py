"""Additive increase, multiplicative decrease on congestion (`net.congestion = "aimd"`, the
default).

For an interval of dt seconds whose queueing delay was q (signal.py: the least over the last
few reports):

    congested (q > TARGET, or loss beyond the link's random loss twice running):
        rate <- BETA * rate, then no other decrease until the queue has drained (q + dt)
    otherwise:
        rate <- rate + GAIN * cap * dt * (1 - q / TARGET)

The increase is LEDBAT's linear controller (RFC 6817 §2.4.2), which slows as the queue nears
its target instead of filling it (without it, and with the delay the least of four reports
instead of two, eight MLP agents on one 4 Mbit/s channel overshot it again and again: the
access point dropped 19% of their frames, against 1.5% with both); the decrease is
TCP's (RFC 5681), held off for one drain time as TCP holds it for one round trip, since the
next reports still show the queue the last decrease already emptied. Random loss at a steady
delay moves nothing. Stations that share a channel and follow this rule converge to equal
rates (Chiu and Jain 1989): the decrease takes more from a larger rate, the increase gives the
same to each.

Tried and not kept: one report's delay as the signal. On the README's 8-board Wi-Fi fleet,
whose channel dropped nothing, the boards' CPU quotas held their threads back 100-250 ms now
and then, which read as a queue: some links sank to the floor (0.2 of 13.5 Mbit/s). It cost
nothing there only because the boards' CPU, not the air, bound the exchanges (the same fleet
at a fixed pace: 10,669 steps and 0.810, against 11,107 and 0.813).
"""

from __future__ import annotations

from edgegossip.dataplane.congestion.base import Controller, Link, register
from edgegossip.dataplane.congestion.signal import TARGET_S, Sample

BETA = 0.7  # what a decrease keeps
GAIN = 0.1  # of the cap a second, at an empty queue: from the floor to the cap in ~10 s
# of the cap, a new link's first pace. Low, because the base delay is learnt from the first
# reports: a link that starts into a full queue takes the queue for the path (LEDBAT's
# latecomer problem, RFC 6817 §4.4) and never sees congestion; at 1/4 of the cap eight
# stations on one channel started at 1.8 times what it carries, and it dropped 9% all run
START = 1 / 16


@register
class Aimd(Controller):
    name = "aimd"

    def _start_rate(self) -> float:
        return (self.cap or 0.0) * START

    def _next(self, link: Link, sample: Sample, dt: float, now: float) -> float:
        assert self.cap is not None
        if sample.congested:
            if now < link.hold_until:
                return link.rate
            link.hold_until = now + sample.queue_delay_s + dt
            return link.rate * BETA
        headroom = 1.0 - sample.queue_delay_s / TARGET_S
        return link.rate + GAIN * self.cap * dt * headroom
