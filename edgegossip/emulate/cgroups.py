"""Each emulated device's share of this machine's CPU and its memory, as the kernel enforces
them: a cgroup per capped node under one per run, its CPU bandwidth limited to `share` cores
(quota = share x period) and its memory to a limit (a device profile's, profiles.py). cgroup v2
(cpu.max, memory.max) where the machine has its cpu controller there, else cgroup v1's cpu and
memory controllers (cpu.cfs_quota_us, memory.limit_in_bytes: this machine's hybrid hierarchy).

A process joins its node's group before it runs anything (join(), from the child between fork
and exec), so the agent and every thread it starts are held to the share from the first
instruction. A share is of one core: 0.25 is a quarter of one, 2.0 two whole ones."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from edgegossip.errors import EdgegossipError
from edgegossip.run import MIN_SHARE

ROOT = Path("/sys/fs/cgroup")
MEMORY_LIMIT = ("memory.max", "memory.limit_in_bytes")  # the limit's file: v2's, v1's
PERIOD_US = 100_000  # the kernel's default bandwidth period; run.MIN_SHARE is 1 ms of it


class CgroupError(EdgegossipError):
    """No cgroup cpu controller this process can use (exit 1)."""


def _v2() -> bool:
    controllers = ROOT / "cgroup.controllers"
    return controllers.is_file() and "cpu" in controllers.read_text().split()


def _base(run: str, controller: str = "cpu") -> Path:
    if _v2():
        return ROOT / f"edgegossip-{run}"
    v1 = ROOT / controller
    if not (v1 / "cgroup.procs").is_file():
        raise CgroupError(
            f"capping devices needs the cgroup {controller} controller (v2, or v1 at {v1}), "
            "which this machine does not offer"
        )
    return v1 / f"edgegossip-{run}"


class DeviceGroups:
    """The run's groups: create() makes them, joiner(i) gives the preexec function that moves
    a child into node i's, remove() deletes them once their processes are gone. `shares`:
    node -> cores; `memory`: node -> MB."""

    def __init__(self, run: str, shares: dict[int, float], memory: dict[int, int] | None = None):
        self.shares = dict(shares)
        self.memory = dict(memory or {})
        self.v2 = _v2()
        self.run = run
        # controller -> the run's group under it (one group for both on v2); create() finds
        # them, so that a machine without a controller is told so where the run's start is
        # handled (CgroupError), not in a constructor
        self.bases: dict[str, Path] = {}

    def create(self) -> None:
        self.bases = {
            c: _base(self.run, c) for c, on in (("cpu", self.shares), ("memory", self.memory)) if on
        }
        try:
            for controller, base in self.bases.items():
                if self.v2:  # the controller must be on in the parents of the groups using it
                    (ROOT / "cgroup.subtree_control").write_text(f"+{controller}")
                base.mkdir(exist_ok=True)
                if self.v2:
                    (base / "cgroup.subtree_control").write_text(f"+{controller}")
            for i, share in self.shares.items():
                self._cpu(self._group("cpu", i), share)
            for i, mb in self.memory.items():
                (self._group("memory", i) / self._memory_file).write_text(str(mb << 20))
        except OSError as e:
            self.remove()
            where = " and ".join(sorted({str(b) for b in self.bases.values()}))
            raise CgroupError(f"cannot cap the devices in {where}: {e.strerror}") from None

    @property
    def _memory_file(self) -> str:
        return MEMORY_LIMIT[0] if self.v2 else MEMORY_LIMIT[1]

    def _group(self, controller: str, i: int) -> Path:
        group = self.bases[controller] / f"node{i}"
        group.mkdir(exist_ok=True)
        return group

    def _cpu(self, group: Path, share: float) -> None:
        quota = int(max(share, MIN_SHARE) * PERIOD_US)
        if self.v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))

    def procs(self, i: int) -> list[Path]:
        """The files a process writes its pid to, to join node i's groups (one on v2)."""
        capped = [c for c, on in (("cpu", self.shares), ("memory", self.memory)) if i in on]
        return sorted({self.bases[c] / f"node{i}" / "cgroup.procs" for c in capped})

    def joiner(self, i: int):
        """A preexec_fn that moves the child into node i's groups before it executes anything;
        None for an uncapped node."""
        targets = [str(p) for p in self.procs(i)]
        if not targets:
            return None

        def join() -> None:
            for target in targets:
                with open(target, "w") as f:
                    f.write(str(os.getpid()))

        return join

    def _memory_read(self, i: int, v2: str, v1: str) -> str | None:
        """A file of node i's memory group (v2's name or v1's); None: not limited, or gone."""
        if i not in self.memory or "memory" not in self.bases:
            return None
        try:
            return (self.bases["memory"] / f"node{i}" / (v2 if self.v2 else v1)).read_text()
        except OSError:
            return None

    def _memory_mb(self, i: int, v2: str, v1: str) -> int | None:
        text = self._memory_read(i, v2, v1)
        return int(text) >> 20 if text and text.strip().isdigit() else None

    def memory_limit_mb(self, i: int) -> int | None:
        """Node i's memory limit as the kernel holds it, in MB; None: not limited."""
        return self._memory_mb(i, *MEMORY_LIMIT)

    def memory_peak_mb(self, i: int) -> int | None:
        """The most memory node i's group held so far, in MB; None: not limited, or a kernel
        that does not keep it (memory.peak is v2 from Linux 5.19)."""
        return self._memory_mb(i, "memory.peak", "memory.max_usage_in_bytes")

    def oom_kills(self, i: int) -> int | None:
        """How many of node i's processes the kernel killed at its memory limit (v2's
        memory.events, v1's memory.oom_control: the line `oom_kill N`); None: not limited."""
        text = self._memory_read(i, "memory.events", "memory.oom_control")
        if text is None:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def throttled_s(self, i: int) -> float | None:
        """Seconds node i's processes were held back by its quota so far; None: uncapped."""
        if i not in self.shares:
            return None
        try:
            text = (self.bases["cpu"] / f"node{i}" / "cpu.stat").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "throttled_usec":  # v2
                return int(value) / 1e6
            if key == "throttled_time":  # v1, nanoseconds
                return int(value) / 1e9
        return None

    def remove(self) -> None:
        for base in self.bases.values():
            if not base.is_dir():
                continue
            for group in base.glob("node*"):
                try:
                    group.rmdir()
                except OSError:
                    pass  # still has a process: left for cleanup
            try:
                base.rmdir()
            except OSError:
                pass


def cleanup() -> list[str]:
    """Remove the groups earlier runs left behind (a run stopped by a signal it could not
    handle), stopping the processes still in them; returns the groups removed."""
    roots = [ROOT] if _v2() else [ROOT / "cpu", ROOT / "memory"]
    removed = []
    for base in (b for root in roots for b in sorted(root.glob("edgegossip-*"))):
        for group in sorted(base.glob("node*")):
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _rmdir(group)
        if _rmdir(base):
            removed.append(str(base.relative_to(ROOT)))
    return removed


def _rmdir(group: Path, wait_s: float = 5.0) -> bool:
    """Remove a group once the processes killed in it are gone (the kernel refuses before)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            group.rmdir()
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
