"""Best-of-N wall-clock timing shared by the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeat: int = 7, min_time: float = 0.05) -> float:
    """Smallest per-call time over `repeat` batches, each batch at least `min_time` long."""
    fn()  # warm caches and page-fault the buffers
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(min_time / once))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best
