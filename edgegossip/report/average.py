"""The fleet's average model: at the end of a run (average), and over it (`emulate --curve`,
CurveSampler): the latter is what "time to 85%" means for a fleet
whose devices hold skewed data, where each device's held-out accuracy (on rows of its own few
classes) says little about the model the fleet is making.

While the fleet runs, each sample averages the checkpoints the agents have written so far (they
write one every checkpoint_every_s) and keeps that average in OUT/curve/ on the host's disk, not
in memory (a large model's vectors, dozens of samples); after the run each is scored on the test
set. A device that has written no checkpoint yet is left out of the average, and the row says how
many devices made it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from edgegossip import checkpoint


def average(params: list[np.ndarray]) -> np.ndarray:
    """The fleet's average model (summed in float64: many small devices, one rounding)."""
    return np.asarray(np.mean(params, axis=0, dtype=np.float64)).astype(np.float32)


TARGETS = (0.85, 0.9, 0.95, 0.97)  # the accuracies whose time the summary reports


class CurveSampler:
    """Averages of the agents' latest checkpoints, each stored under out/curve with its time."""

    def __init__(self, out: Path, agents: int):
        self.dir = out / "curve"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.agents = agents
        self._seen: dict[int, tuple[int, np.ndarray]] = {}  # agent -> (mtime_ns, params)

    def sample(self, t: float) -> None:
        """One sample at t seconds from the fleet's start, if any agent has a checkpoint; a
        checkpoint is read again only once it has changed."""
        for i in range(self.agents):
            path = self.dir.parent / f"agent{i}" / checkpoint.NAME
            try:
                mtime = path.stat().st_mtime_ns
                if self._seen.get(i, (None,))[0] != mtime:
                    state = checkpoint.load(path.parent)
                    if state is not None:
                        self._seen[i] = (mtime, state["params"])
            except (OSError, checkpoint.CheckpointError):
                continue  # none yet, or replaced as it was read: the next sample has it
        if self._seen:
            np.save(self.dir / f"{t:09.1f}.npy", average([p for _, p in self._seen.values()]))
            with open(self.dir / "samples.jsonl", "a") as f:
                f.write(json.dumps({"time_s": round(t, 1), "devices": len(self._seen)}) + "\n")


def scored(out: Path, model, x: np.ndarray, y: np.ndarray) -> list[dict]:
    """Each sample of out/curve scored on (x, y): rows of time_s, devices and accuracy (or the
    model's mse)."""
    path = out / "curve" / "samples.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        scores = model.evaluate(np.load(out / "curve" / f"{r['time_s']:09.1f}.npy"), x, y)
        r.update(accuracy=scores.get("accuracy"), mse=scores.get("eval_mse"))
    return rows


def time_to(rows: list[dict], target: float) -> float | None:
    """Seconds until the first sample whose average model scored at least target (None: never)."""
    return next(
        (r["time_s"] for r in rows if r["accuracy"] is not None and r["accuracy"] >= target), None
    )
