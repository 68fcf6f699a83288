"""What a compiled model's training step takes in memory, and whether this device can hold it.

`model compile --batch B` measures the step in a fresh process on the operator's machine, at batch
1 and at B (bench/train.py), and writes the two peaks to memory.json beside the manifest. It is
not in the manifest: it is a measurement of that machine, and the digest names the model alone.
A step's peak grows with the batch by its activations; the rest (the runtime, the graphs, the
parameters, gradient and momentum) does not, so an agent reads its own batch off the line
through the two points. The measuring host's onnxruntime allocates the same tensors as a
device's build of the same version, so the estimate stands for the board's.

An agent whose estimate exceeds the memory it may use (its cgroup's limit, else the board's
RAM) refuses to start, in one line, instead of being killed by the kernel mid-run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgegossip.artifact import MEMORY as FILE

_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2^63 - 1
_MOST_BYTES = 4096  # a footprint is a few points; a larger file is not one


# the two ways an agent trains a compiled model: its whole training graph, or the part after a
# frozen prefix, on the prefix's outputs computed once (agent/shard.py's after_prefix)
WHOLE, CACHED = "compiled", "compiled-prefix"


@dataclass(frozen=True)
class Footprint:
    # per way of training (WHOLE, CACHED): (batch, a step's peak RSS in MB), batch ascending
    points: dict[str, tuple[tuple[int, float], ...]]

    def at(self, batch: int, way: str = WHOLE) -> float | None:
        """A step's peak at `batch`, MB, on the line through the two points measured (their
        value where only one was); None where this way was not measured."""
        points = self.points.get(way)
        if not points:
            return None
        (b0, m0), (b1, m1) = points[0], points[-1]
        if b1 == b0:
            return m1
        return m0 + (m1 - m0) * (batch - b0) / (b1 - b0)

    def to_json(self) -> dict:
        return {way: {str(b): mb for b, mb in pts} for way, pts in self.points.items()}


def write(folder: Path, points: dict[str, list[tuple[int, float]]]) -> Footprint:
    fp = Footprint({way: tuple(sorted(pts)) for way, pts in points.items()})
    (Path(folder) / FILE).write_text(json.dumps(fp.to_json()) + "\n")
    return fp


def read(folder: str | Path) -> Footprint | None:
    """The folder's measured footprint; None where none was measured or the file is not one
    (a footprint only ever refuses a start: a bad file refuses nothing)."""
    try:
        with open(Path(folder) / FILE, "rb") as f:
            raw = f.read(_MOST_BYTES + 1)
        if len(raw) > _MOST_BYTES:
            return None
        doc = json.loads(raw)
        points = {
            way: tuple(sorted((int(b), float(mb)) for b, mb in doc[way].items()))
            for way in (WHOLE, CACHED)
            if way in doc
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    flat = [p for pts in points.values() for p in pts]
    if not flat or any(b < 1 or not 0 < mb < 1e7 for b, mb in flat):
        return None
    return Footprint(points)


def limit_mb() -> float | None:
    """The memory this process may use, MB: its memory cgroup's limit (v2 or v1) where one is
    set, else the machine's RAM; None where neither can be read."""
    limits = [mb for mb in (_cgroup_limit_mb(), _mem_total_mb()) if mb is not None]
    return min(limits) if limits else None


def _cgroup_limit_mb() -> float | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2's unified hierarchy
            where = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max"
        elif "memory" in controllers.split(","):
            where = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes"
        else:
            continue
        try:
            raw = where.read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < _UNLIMITED:
            return int(raw) / 2**20
    return None


def _mem_total_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def refusal(folder: str | Path, batch: int, way: str, held_mb: float) -> str | None:
    """Why this device cannot train the model in `folder` at `batch` (one line), or None: a step
    the way it will train, plus held_mb that the agent holds beside it (its data, a prefix's
    cached outputs)."""
    fp, limit = read(folder), limit_mb()
    step = fp.at(batch, way) if fp is not None else None
    if step is None or limit is None or step + held_mb <= limit:
        return None
    return (
        f"training this model at batch {batch} needs about {step + held_mb:.0f} MB (a step "
        f"{step:.0f} MB as model compile measured it, {held_mb:.0f} MB of data) and this "
        f"device has {limit:.0f} MB: train a smaller batch or freeze more of the model"
    )
