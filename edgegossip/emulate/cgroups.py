"""Each emulated device's share of this machine's CPU, as the kernel enforces it: a cgroup per
capped node under one per run, its CPU bandwidth limited to `share` cores (quota = share x
period). cgroup v2 (cpu.max) where the machine has its cpu controller there, else cgroup v1's
cpu controller (cpu.cfs_quota_us and cpu.cfs_period_us: this machine's hybrid hierarchy).

A process joins its node's group before it runs anything (join(), from the child between fork
and exec), so the agent and every thread it starts are held to the share from the first
instruction. A share is of one core: 0.25 is a quarter of one, 2.0 two whole ones."""

from __future__ import annotations

import os
from pathlib import Path

from edgegossip.errors import EdgegossipError

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kernel's default bandwidth period


class CgroupError(EdgegossipError):
    """No cgroup cpu controller this process can use (exit 1)."""


def _v2() -> bool:
    controllers = ROOT / "cgroup.controllers"
    return controllers.is_file() and "cpu" in controllers.read_text().split()


def _base(run: str) -> Path:
    if _v2():
        return ROOT / f"edgegossip-{run}"
    v1 = ROOT / "cpu"
    if not (v1 / "cpu.cfs_quota_us").is_file():
        raise CgroupError(
            "--cpu needs the cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us), "
            "which this machine does not offer"
        )
    return v1 / f"edgegossip-{run}"


class CpuShares:
    """The run's groups: create() makes them, joiner(i) gives the preexec function that moves
    a child into node i's, remove() deletes them once their processes are gone."""

    def __init__(self, run: str, shares: dict[int, float]):
        self.shares = dict(shares)
        self.base = _base(run) if shares else Path()
        self.v2 = _v2()

    def create(self) -> None:
        if not self.shares:
            return
        try:
            if self.v2:  # the controller must be on in the parents of the groups that use it
                (ROOT / "cgroup.subtree_control").write_text("+cpu")
            self.base.mkdir(exist_ok=True)
            if self.v2:
                (self.base / "cgroup.subtree_control").write_text("+cpu")
            for i, share in self.shares.items():
                self._limit(self.base / f"node{i}", share)
        except OSError as e:
            self.remove()
            raise CgroupError(f"cannot cap the devices' CPU in {self.base}: {e.strerror}") from None

    def _limit(self, group: Path, share: float) -> None:
        group.mkdir(exist_ok=True)
        quota = max(1000, int(share * PERIOD_US))  # the kernel's least quota is 1 ms
        if self.v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))

    def procs(self, i: int) -> Path | None:
        """The file a process writes its pid to, to join node i's group; None: uncapped."""
        if i not in self.shares:
            return None
        return self.base / f"node{i}" / "cgroup.procs"

    def joiner(self, i: int):
        """A preexec_fn that moves the child into node i's group before it executes anything;
        None for an uncapped node."""
        path = self.procs(i)
        if path is None:
            return None
        target = str(path)

        def join() -> None:
            with open(target, "w") as f:
                f.write(str(os.getpid()))

        return join

    def throttled_s(self, i: int) -> float | None:
        """Seconds node i's processes were held back by its quota so far; None: uncapped."""
        path = self.procs(i)
        if path is None:
            return None
        try:
            text = (path.parent / "cpu.stat").read_text()
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
        if not self.shares or not self.base.is_dir():
            return
        for i in self.shares:
            try:
                (self.base / f"node{i}").rmdir()
            except OSError:
                pass  # still has a process: left for cleanup
        try:
            self.base.rmdir()
        except OSError:
            pass
