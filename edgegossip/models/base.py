"""The model interface and the flat parameter layout shared by every model."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class FlatLayout:
    """Named tensors laid out back to back in one float32 vector."""

    def __init__(self, shapes: list[tuple[str, tuple[int, ...]]]):
        self.shapes = shapes
        self.offsets = {}
        off = 0
        for name, shape in shapes:
            size = int(np.prod(shape))
            self.offsets[name] = (off, off + size, shape)
            off += size
        self.size = off

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Views into flat (no copies): writing a view writes the vector."""
        if flat.shape != (self.size,) or flat.dtype != np.float32:
            raise ValueError(f"need a float32 vector of {self.size}")
        return {n: flat[a:b].reshape(s) for n, (a, b, s) in self.offsets.items()}


def log_softmax_xent(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    n = len(y)
    loss = -float(logp[np.arange(n), y].mean())
    g = np.exp(logp)
    g[np.arange(n), y] -= 1.0
    g /= n
    return loss, g.astype(np.float32, copy=False)


class Model(ABC):
    layout: FlatLayout
    # a step so short (logistic regression: ~0.07 ms here) that inflating a batch of packed
    # rows (data/packed.py, ~0.09 ms) would more than double it: such a model's agent keeps its
    # shard plain
    light_step: bool = False
    # one example's shape where the model has one (a compiled model's manifest says it); () for
    # the named models, which take flat features
    input_shape: tuple[int, ...] = ()
    # a compiled model's artifact digest (the SHA-256 of its manifest); None for the named ones
    digest: str | None = None
    # a backward pass that hands each block of gradient to the optimiser as soon as it is
    # known (loss_grad_layerwise), so no whole-model gradient exists (the NumPy MLP)
    layerwise: bool = False
    # what it is trained on: class labels (cross-entropy), or targets in its output's shape
    # (mse: regression, an autoencoder's reconstruction), scored by evaluate() accordingly
    loss: str = "cross-entropy"
    input_dtype: np.dtype = np.dtype(np.float32)  # int64: token ids (a compiled embedding)

    @property
    def n_params(self) -> int:
        return self.layout.size

    def shapes(self, inputs: int, classes: int) -> tuple[int, int]:
        """(features, classes) this model takes: the settings' for the named models, which are
        built to them; a compiled model says its own."""
        return inputs, classes

    @abstractmethod
    def init(self, seed: int) -> np.ndarray:
        """A freshly initialised flat parameter vector."""

    @abstractmethod
    def loss_grad(
        self,
        params: np.ndarray,
        grad: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        rng: np.random.Generator | None,
    ) -> float:
        """Mean loss on (x, y); writes d loss / d params into grad. rng=None disables dropout."""

    def max_layer_params(self) -> int:
        """The gradient buffer loss_grad_layerwise needs."""
        return self.n_params

    def loss_grad_layerwise(self, params, grad, x, y, rng, apply) -> float:
        """As loss_grad, handing each block to apply(lo, hi, g_part) (where layerwise)."""
        raise NotImplementedError(f"{type(self).__name__} has no layer-by-layer step")

    @abstractmethod
    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Inference (no dropout)."""

    def accuracy(
        self, params: np.ndarray, x: np.ndarray, y: np.ndarray, batch: int = 2000
    ) -> float:
        hits = 0
        for i in range(0, len(x), batch):
            hits += int((self.logits(params, x[i : i + batch]).argmax(1) == y[i : i + batch]).sum())
        return hits / len(x)

    def squared_error(
        self, params: np.ndarray, x: np.ndarray, y: np.ndarray, batch: int = 2000
    ) -> float:
        """The sum over examples and elements of (output - target)^2 (y flat per example)."""
        total = 0.0
        for i in range(0, len(x), batch):
            out = self.logits(params, x[i : i + batch]).astype(np.float64)
            total += float(np.square(out - y[i : i + batch].reshape(len(out), -1)).sum())
        return total

    def evaluate(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict:
        """The held-out scores for this model's loss: accuracy for a classifier; for an mse
        model its mean squared error per element (eval_mse), accuracy null."""
        if not len(x):
            return {"accuracy": None} if self.loss == "mse" else {"accuracy": 0.0}
        if self.loss != "mse":
            return {"accuracy": self.accuracy(params, x, y)}
        elements = len(x) * (y[0].size if y.ndim > 1 else 1)
        return {"accuracy": None, "eval_mse": round(self.squared_error(params, x, y) / elements, 6)}
