"""Everything an agent writes to its disk, written by one background thread, within a budget.

A Raspberry Pi's disk is an SD card: slow to fsync, worn out by writes, small. So the training
thread never writes: it hands this thread metrics records and parameter snapshots, and goes on
stepping while they are written and fsynced. The thread keeps the agent's output within
`disk_budget_mb`: room for the checkpoint twice (the one on disk and the one being written),
and the rest for metrics.jsonl, which is compacted when it outgrows its share. Compaction keeps
every event record and the newest half of the step records at full rate and every other one of
the older half, so repeated compactions thin the past geometrically and a reader still gets the
whole run, at a resolution that falls with age.

A disk that is nearly full (less free than a checkpoint and a margin) stops the metrics and
skips checkpoints, and says so (`disk_note`); the last good checkpoint stays, training goes on.
What the disk costs is in view: bytes this process wrote (the kernel's count in /proc/self/io,
which includes what the page cache will write later), per hour, the free space, and how old
the last checkpoint is.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np

from edgegossip import checkpoint
from edgegossip.metrics import drop_torn_line

log = logging.getLogger(__name__)

METRICS = "metrics.jsonl"
MARGIN = 1 << 20  # free space kept beyond a checkpoint, for the journal and the session file


def written_bytes() -> int | None:
    """Bytes this process has caused to be written to storage (None without /proc)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def checkpoint_bytes(n_params: int) -> int:
    """About what one checkpoint of a model this size takes on disk (float32 parameters, the
    replay marks and the zip's own bytes)."""
    return 4 * n_params + (64 << 10)


def metrics_share(budget_bytes: int, checkpoint_bytes: int) -> int:
    """What metrics.jsonl may grow to within the budget; a budget too small is a ValueError."""
    room = budget_bytes - 2 * checkpoint_bytes - MARGIN
    if room < 1 << 20:
        raise ValueError(
            f"disk.budget_mb {budget_bytes / 1e6:g} leaves no room for metrics beside two "
            f"checkpoints of {checkpoint_bytes / 1e6:.1f} MB and {MARGIN >> 20} MB of margin"
        )
    return room


def _median(xs: list[float]) -> float:
    """np.median's value without np.median, which imports numpy.ma on its first call: under a
    flood of connections that left no descriptor, that import failed and ended the agent at its
    first metrics record (tests/test_control.py)."""
    a = np.asarray(xs)
    k = len(a) // 2
    part = np.partition(a, [k - 1, k] if len(a) % 2 == 0 else [k])
    return float((part[k - 1] + part[k]) / 2 if len(a) % 2 == 0 else part[k])


class StepTimes:
    """How long steps take, between two metrics records: the median step, and the longest step
    taken while a checkpoint was being written (what the write cost training, if anything)."""

    def __init__(self) -> None:
        self._t = time.monotonic()
        self._steps: list[float] = []
        self._stall: float | None = None

    def start(self) -> None:
        self._t = time.monotonic()

    def tick(self, writing: bool) -> None:
        now = time.monotonic()
        took, self._t = now - self._t, now
        if len(self._steps) < 100_000:
            self._steps.append(took)
        if writing:
            self._stall = max(self._stall or 0.0, took)

    def take(self) -> dict:
        out = {
            "step_ms": round(_median(self._steps) * 1e3, 3) if self._steps else None,
            "checkpoint_stall_ms": None if self._stall is None else round(self._stall * 1e3, 1),
        }
        self._steps, self._stall = [], None
        return out


@dataclass
class _Checkpoint:
    arrays: dict[str, np.ndarray]
    step: int
    done: Callable[[], None] | None = None  # gives the snapshot buffer back
    finished: threading.Event = field(default_factory=threading.Event)
    ok: bool = False


class Storage:
    def __init__(self, out: Path, budget_bytes: int, checkpoint_bytes: int, resumed_step: int = -1):
        """resumed_step: the step of the checkpoint the agent resumed from (-1: none)."""
        self.out = out
        self.metrics_path = out / METRICS
        self.checkpoint_bytes = checkpoint_bytes
        self.metrics_cap = metrics_share(budget_bytes, checkpoint_bytes)
        self.t0 = time.monotonic()
        self.written_at_start = written_bytes()
        self.checkpoint_failures = 0
        self.checkpoint_error: str | None = None
        self.checkpoint_step, self.checkpoint_at = -1, 0.0
        # (time, bytes written) when this process's first and latest checkpoints were done:
        # the steady-state write rate is measured between them, start-up's writes excluded
        self._first_done: tuple[float, int] | None = None
        self._last_done: tuple[float, int] | None = None
        if resumed_step >= 0:  # the last good checkpoint is the one resumed from, as old as it is
            try:
                age = time.time() - (out / checkpoint.NAME).stat().st_mtime
            except OSError:
                age = 0.0
            self.checkpoint_step, self.checkpoint_at = resumed_step, time.monotonic() - age
        self.metrics_dropped = 0  # records not written: the disk was nearly full
        self.compactions = 0
        self.note: str | None = None
        self.busy = threading.Event()  # a checkpoint is being written
        out.mkdir(parents=True, exist_ok=True)
        drop_torn_line(self.metrics_path)
        self._f: TextIO | None = open(self.metrics_path, "a", buffering=1)
        self._jobs: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="storage", daemon=True)
        self._thread.start()

    # -- training thread ---------------------------------------------------------------------
    def record(self, rec: dict) -> None:
        """A metrics record, written soon; never blocks."""
        self._jobs.put({"time": round(time.time(), 3), **rec})

    def checkpoint(
        self, arrays: dict[str, np.ndarray], step: int, done: Callable[[], None] | None = None
    ) -> _Checkpoint:
        """Write these arrays as the checkpoint of `step` in the background; done() is called
        once they are no longer read. wait() on the result's `finished` for a synchronous one."""
        job = _Checkpoint(arrays, step, done)
        self.busy.set()
        self._jobs.put(job)
        return job

    def report(self) -> dict:
        """The disk's figures for a metrics record, `status` and `fleet status`."""
        now = time.monotonic()
        w = written_bytes()
        written = None if w is None or self.written_at_start is None else w - self.written_at_start
        free = free_bytes(self.out)
        return {
            "disk_written_mb": None if written is None else round(written / 1e6, 1),
            "disk_written_mb_per_h": self.steady_mb_per_h(),
            "disk_free_mb": None if free is None else round(free / 1e6),
            "checkpoint_age_s": (
                round(now - self.checkpoint_at, 1) if self.checkpoint_step >= 0 else None
            ),
            "checkpoint_step": self.checkpoint_step if self.checkpoint_step >= 0 else None,
            "checkpoint_failures": self.checkpoint_failures,
            "disk_note": self.note,
        }

    def steady_mb_per_h(self) -> float | None:
        """What the agent writes per hour once started: the bytes written between the end of
        its first checkpoint and the end of its latest, over that time, so whole checkpoint
        intervals count and start-up's writes (a venv's caches, the first metrics, a data set
        cut) do not. None until two checkpoints were written (or without /proc)."""
        first, last = self._first_done, self._last_done
        if first is None or last is None or last[0] - first[0] <= 0:
            return None
        return round((last[1] - first[1]) / 1e6 / ((last[0] - first[0]) / 3600), 1)

    def close(self) -> None:
        """Write what is queued, then stop; safe to call twice."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()
        if self._f is not None and not self._f.closed:
            self._f.close()

    # -- the storage thread ------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                if isinstance(job, _Checkpoint):
                    self._write_checkpoint(job)
                else:
                    self._write_record(job)
            except Exception:  # the disk's trouble is reported, never the agent's end
                log.exception("storage: a write failed")

    def _room(self, need: int) -> bool:
        free = free_bytes(self.out)
        return free is None or free >= need + MARGIN

    def _write_checkpoint(self, job: _Checkpoint) -> None:
        try:
            if not self._room(self.checkpoint_bytes):
                self._fail(job.step, "disk nearly full: checkpoint skipped, the last one kept")
                return
            checkpoint.save(self.out, **job.arrays)
        except OSError as e:
            self._fail(job.step, f"checkpoint not written: {e.strerror or e}")
        else:
            job.ok = True
            if self.checkpoint_error is not None:
                log.warning("step %d: checkpoint written again", job.step)
            self.checkpoint_error = None
            self.checkpoint_step, self.checkpoint_at = job.step, time.monotonic()
            w = written_bytes()
            if w is not None:
                done = (self.checkpoint_at, w)
                self._first_done = self._first_done or done
                self._last_done = done
            if self.note and self.note.startswith(("checkpoint", "disk nearly full")):
                self.note = None
        finally:
            if job.done is not None:
                job.done()
            self.busy.clear()
            job.finished.set()

    def _fail(self, step: int, why: str) -> None:
        self.checkpoint_failures += 1
        # a line when the trouble starts or changes, not one a checkpoint: out of descriptors
        # or disk, that was a line every few steps, written to the card by the journal
        if why != self.checkpoint_error:
            log.warning("step %d: %s (counted in checkpoint_failures from now)", step, why)
        self.checkpoint_error = self.note = why

    def _write_record(self, rec: dict) -> None:
        line = json.dumps(rec) + "\n"
        if not self._room(len(line) + self.checkpoint_bytes):
            self.metrics_dropped += 1
            self.note = f"disk nearly full: metrics paused ({self.metrics_dropped} not written)"
            return
        if self._f is None:
            self._f = self._reopen()
        if self._f is None:  # _reopen said why in the note
            self.metrics_dropped += 1
            return
        try:
            self._f.write(line)
        except OSError as e:
            self.metrics_dropped += 1
            self.note = f"metrics not written: {e.strerror or e}"
            return
        if self.note and self.note.startswith(("disk nearly full: metrics", "metrics")):
            self.note = None
        if self._f.tell() > self.metrics_cap:
            self._compact()

    def _compact(self) -> None:
        """Rewrite metrics.jsonl within its share (atomically: a power cut leaves the old file
        or the new one): events and the newest half of the records whole, every other one of
        the older half."""
        if self._f is not None:
            self._f.close()
        try:
            lines = self.metrics_path.read_bytes().splitlines(keepends=True)
            steps = [i for i, ln in enumerate(lines) if b'"event"' not in ln]
            older = set(steps[: len(steps) // 2])
            dropped = set(sorted(older)[1::2])
            kept = b"".join(ln for i, ln in enumerate(lines) if i not in dropped)
            tmp = self.metrics_path.with_name(f".{METRICS}.tmp")
            with open(tmp, "wb") as f:
                f.write(kept)
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self.metrics_path)
            self.compactions += 1
        except OSError as e:
            self.note = f"metrics not compacted: {e.strerror or e}"
        finally:
            self._f = self._reopen()

    def _reopen(self):
        """metrics.jsonl for appending again, or None (out of descriptors, say: the next
        record tries again)."""
        try:
            return open(self.metrics_path, "a", buffering=1)
        except OSError as e:
            self.note = f"metrics not written: {e.strerror or e}"
            return None
