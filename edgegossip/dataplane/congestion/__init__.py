"""Congestion control for the data plane: the room the sender asks how fast it may send.

base.py    the controller the sender asks (rate per peer), fed sends and receivers' reports;
           the registry of algorithms by name
signal.py  what a report says: queueing delay against the base delay, loss beyond random
aimd.py    delay-targeted additive increase, multiplicative decrease (the default)
fixed.py   the cap, always: the reference
"""

from __future__ import annotations

from edgegossip.dataplane.congestion import aimd, fixed
from edgegossip.dataplane.congestion.base import CONTROLLERS, FEEDBACK_S, Controller
from edgegossip.dataplane.congestion.signal import Report, Sample

NAMES = tuple(CONTROLLERS)  # aimd first: the default


def make(name: str, cap_bytes_per_s: float | None) -> Controller:
    """The controller `name` for links paced at most at cap_bytes_per_s (None: unpaced)."""
    try:
        return CONTROLLERS[name](cap_bytes_per_s)
    except KeyError:
        raise ValueError(f"congestion must be one of {', '.join(NAMES)}") from None


__all__ = [
    "CONTROLLERS",
    "FEEDBACK_S",
    "NAMES",
    "Controller",
    "Report",
    "Sample",
    "make",
    "aimd",
    "fixed",
]
