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

    def step_slice(self, x: np.ndarray, g: np.ndarray, lo: int, hi: int) -> None:
        """The same step on x[lo:hi] only, g being that slice's gradient (elementwise, so a
        model stepped slice by slice ends exactly where one whole step puts it)."""
        kernels.nesterov_step(x[lo:hi], self.v[lo:hi], g, self.lr, self.mu)
