"""What the agent knows of its wall clock, and how long it waits for it.

No Raspberry Pi has a real-time clock: it boots with the time its last shutdown saved
(fake-hwclock) or with the kernel's build date, and a fleet on a LAN without a time server never
gets a better one. The agent does not need one: sessions and sequence numbers come from its own
checkpointed counters, every interval it measures is monotonic, and only the `time` of its
records is wall time. So it waits a bounded time at start (`agent.clock_wait_s`) for a clock to
be synchronised, then trains whatever the clock says, and reports which it is (`clock` in every
record and in `status`, so `fleet status` shows an unsynchronised device and a reader of the
records knows which timestamps to trust).

The state comes from systemd-timesyncd, the time client Raspberry Pi OS runs: it creates
/run/systemd/timesync/synchronized once the kernel's clock is synchronised (systemd 239 and
later) and keeps /run/systemd/timesync while it runs. The agent's unit may not call adjtimex
(ProtectClock=), and a file is all it needs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

TIMESYNC = Path("/run/systemd/timesync")
SYNCHRONISED, UNSYNCHRONISED, UNKNOWN = "synchronised", "unsynchronised", "unknown"
STATES = (SYNCHRONISED, UNSYNCHRONISED, UNKNOWN)


def state(timesync: Path | None = None) -> str:
    """synchronised, unsynchronised (timesyncd runs, no server answered yet) or unknown (no
    timesyncd here: an emulated agent, another time client)."""
    timesync = timesync or TIMESYNC
    if (timesync / "synchronized").exists():
        return SYNCHRONISED
    return UNSYNCHRONISED if timesync.is_dir() else UNKNOWN


def wait(limit_s: float, stop: threading.Event, timesync: Path | None = None) -> str:
    """Wait at most limit_s while the clock is unsynchronised (not when its state is unknown:
    nothing would ever say it is done); the state then."""
    deadline = time.monotonic() + limit_s
    now = state(timesync)
    while now == UNSYNCHRONISED and time.monotonic() < deadline and not stop.is_set():
        stop.wait(min(1.0, max(0.0, deadline - time.monotonic())))
        now = state(timesync)
    return now
