"""SGD with Nesterov momentum on a flat vector, as PyTorch computes it (dampening 0):
    v <- mu * v + g;   x <- x - lr * (g + mu * v)
The momentum buffer belongs to the worker; gossip terms never touch it."""

from __future__ import annotations

import numpy as np

from edgegossip import kernels


class NesterovSGD:
    def __init__(self, n: int, lr: float = 0.001, momentum: float = 0.99):
        self.lr = float(lr)
        self.mu = float(momentum)
        self.v = np.zeros(n, np.float32)

    def step(self, x: np.ndarray, g: np.ndarray) -> None:
        kernels.nesterov_step(x, self.v, g, self.lr, self.mu)
