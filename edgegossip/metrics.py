"""Metrics as JSON lines, one object per record (written by storage.py), and reading them back."""

from __future__ import annotations

import json
import resource
from pathlib import Path

_last_peak = 0.0

# every alarm an agent raises (protocol/liveness.py), and what it means: the one list that
# records, `status`, /metrics and the emulate summary name
ALARMS = {
    "merges_stopped": "peers are heard but nothing was merged for a while",
    "weight_below_floor": "the push-sum weight fell below its floor (gossip-push)",
    "suspect_peer": "a peer's rounds are clipped or refused again and again (protocol/bound.py)",
}


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB. VmHWM, not getrusage's ru_maxrss: Linux carries
    ru_maxrss across execve, so a process started by a large parent (emulate holds MNIST) would
    report the parent's size as its own. Out of descriptors (a flood on the control port), the
    last value read stands in: a figure is not worth an agent."""
    global _last_peak
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    _last_peak = round(int(line.split()[1]) / 1024, 1)
                    return _last_peak
    except OSError:
        return _last_peak or round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def thread_cpu_s(thread) -> float | None:
    """CPU seconds a running thread has used (Linux: its own CPU clock), None once it ended."""
    import time

    ident = getattr(thread, "ident", None)
    if ident is None or not thread.is_alive():
        return None
    try:
        return round(time.clock_gettime(time.pthread_getcpuclockid(ident)), 3)
    except (OSError, AttributeError):
        return None


def drop_torn_line(path: Path) -> None:
    """Cut a last line that a kill or power loss left without its newline, so the next record
    starts a line of its own instead of being glued to the fragment."""
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return
    with f:
        size = f.seek(0, 2)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        keep = 0
        pos = size
        while pos > 0 and not keep:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                keep = pos + nl + 1
        f.truncate(keep)


def read(path: str | Path) -> list:
    """The file's records, as JSON gave them; a line that is not JSON (cut by kill -9, or not
    text at all) is passed over. What a record holds is checked by catalog.invalid."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except (ValueError, RecursionError):  # undecodable, not JSON, nested too deep
                continue
    return out
