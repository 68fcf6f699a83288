"""Split training indices across W workers, deterministically from a seed.

- iid: a random permutation cut into W disjoint equal shards (the seed's setting; the remainder
  of len // W is dropped so every worker has the same number of examples).
- dirichlet: for each class, proportions over workers drawn from Dirichlet(beta); small beta
  gives each worker few classes (Hsu et al. 2019).
- classes: each worker gets k classes; each class's examples are split among the workers that
  hold it.
"""

from __future__ import annotations

import numpy as np


def iid(n: int, workers: int, seed: int = 0) -> list[np.ndarray]:
    _check(n, workers)
    perm = np.random.default_rng(seed).permutation(n)
    size = n // workers
    return [np.sort(perm[i * size : (i + 1) * size]) for i in range(workers)]


def dirichlet(labels: np.ndarray, workers: int, beta: float, seed: int = 0) -> list[np.ndarray]:
    _check(len(labels), workers)
    if beta <= 0:
        raise ValueError("the Dirichlet concentration must be positive")
    rng = np.random.default_rng(seed)
    shards: list[list[np.ndarray]] = [[] for _ in range(workers)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(rng.dirichlet(np.full(workers, beta))) * len(idx)).astype(int)[:-1]
        for w, part in enumerate(np.split(idx, cuts)):
            shards[w].append(part)
    return [np.sort(np.concatenate(s)) for s in shards]


def classes(labels: np.ndarray, workers: int, k: int, seed: int = 0) -> list[np.ndarray]:
    _check(len(labels), workers)
    all_classes = np.unique(labels)
    if not 1 <= k <= len(all_classes):
        raise ValueError(f"k must be in 1..{len(all_classes)}")
    rng = np.random.default_rng(seed)
    # round-robin over a shuffled class list so every class is held by someone when W*k >= C
    order = rng.permutation(all_classes)
    held = [[order[(w * k + j) % len(order)] for j in range(k)] for w in range(workers)]
    shards: list[list[np.ndarray]] = [[] for _ in range(workers)]
    for c in all_classes:
        owners = [w for w in range(workers) if c in held[w]]
        if not owners:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for w, part in zip(owners, np.array_split(idx, len(owners))):
            shards[w].append(part)
    return [np.sort(np.concatenate(s)) if s else np.zeros(0, np.int64) for s in shards]


def cut(
    kind: str, labels: np.ndarray, workers: int, seed: int = 0, beta: float = 0.5, k: int = 2
) -> list[np.ndarray]:
    """The shards of partition `kind` (train.partition; beta and k as train.beta and
    train.classes_per_worker say), for whatever cuts a data set: an agent its own shard, `data
    split` every device's file, simulate its workers'."""
    if kind == "iid":
        return iid(len(labels), workers, seed)
    if kind == "dirichlet":
        return dirichlet(labels, workers, beta, seed)
    if kind == "classes":
        return classes(labels, workers, k, seed)
    raise ValueError("partition must be iid, dirichlet or classes")


def _check(n: int, workers: int) -> None:
    if workers < 1 or workers > n:
        raise ValueError(f"cannot split {n} examples across {workers} workers")
