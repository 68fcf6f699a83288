"""A fixed pace (`net.congestion = "fixed"`): every link at the cap, whatever its reports say,
as the data plane sent before it had congestion control. The reference a run compares the
controllers with; its reports are still measured, so its links' queueing delays show what a
fixed pace does to the channel."""

from __future__ import annotations

from edgegossip.dataplane.congestion.base import Controller, Link, register
from edgegossip.dataplane.congestion.signal import Sample


@register
class Fixed(Controller):
    name = "fixed"

    def _next(self, link: Link, sample: Sample, dt: float, now: float) -> float:
        assert self.cap is not None
        return self.cap
