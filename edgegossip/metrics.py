"""Metrics as JSON lines, one object per record, flushed so a crash loses at most one line."""

from __future__ import annotations

import json
import time
from pathlib import Path


class MetricsLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1)
        self.t0 = time.time()

    def write(self, record: dict) -> None:
        self._f.write(json.dumps({"time": round(time.time(), 3), **record}) + "\n")

    def close(self) -> None:
        self._f.close()


def read(path: str | Path) -> list[dict]:
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by kill -9
                continue
    return out
