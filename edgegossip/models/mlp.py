"""Multilayer perceptron over a flat parameter vector; logistic regression is the no-hidden case.

Forward, with inverted dropout (keep probability q, surviving units scaled by 1/q):
    h_0 = dropout(x, p_in);  a_l = h_{l-1} W_l + b_l;  h_l = dropout(relu(a_l), p_hidden)
    logits = h_{L-1} W_L + b_L;  loss = mean cross-entropy(logits, y)
Backward: dW_l = h_{l-1}^T da_l, db_l = sum da_l, dh_{l-1} = da_l W_l^T, then through the dropout
mask and relu'(a). Weights use Kaiming (He) normal init, std sqrt(2 / fan_in); biases start at 0.
The seed MLP is 784-1024-1024-1024-10 with dropout 0.2 on the input and 0.5 after each hidden
layer: 2,913,290 parameters.
"""

from __future__ import annotations

import numpy as np

from edgegossip.models.base import FlatLayout, Model, log_softmax_xent

GRAD_BLOCK_FLOATS = 131072  # 512 KB of gradient at a time when the optimiser steps inside backward


class MLP(Model):
    def __init__(
        self, sizes: list[int], dropout_in: float = 0.2, dropout_hidden: float = 0.5, seed: int = 0
    ):
        self.sizes = list(sizes)
        self.light_step = len(self.sizes) == 2  # no hidden layer: logistic regression
        self.dropout_in = dropout_in
        self.dropout_hidden = dropout_hidden
        shapes = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            shapes += [(f"W{i}", (a, b)), (f"b{i}", (b,))]
        self.layout = FlatLayout(shapes)
        self.n_layers = len(sizes) - 1
        self.seed = seed

    @classmethod
    def seed_mlp(cls, seed: int = 0) -> MLP:
        return cls([784, 1024, 1024, 1024, 10], 0.2, 0.5, seed)

    def init(self, seed: int | None = None) -> np.ndarray:
        rng = np.random.default_rng(self.seed if seed is None else seed)
        flat = np.zeros(self.layout.size, np.float32)
        v = self.layout.views(flat)
        for i in range(self.n_layers):
            fan_in = self.sizes[i]
            v[f"W{i}"][...] = rng.standard_normal(v[f"W{i}"].shape, dtype=np.float32) * np.float32(
                np.sqrt(2.0 / fan_in)
            )
        return flat

    def dropout_masks(self, batch: int, rng: np.random.Generator | None) -> list[np.ndarray | None]:
        """Scaled keep-masks for the input and each hidden layer, drawn in that order (the ONNX
        training backend is fed the same masks, so both backends see the same randomness)."""
        out: list[np.ndarray | None] = []
        for i in range(self.n_layers):
            p = self.dropout_in if i == 0 else self.dropout_hidden
            if rng is None or p <= 0:
                out.append(None)
                continue
            keep = (rng.random((batch, self.sizes[i]), dtype=np.float32) >= p).astype(np.float32)
            keep *= np.float32(1.0 / (1.0 - p))
            out.append(keep)
        return out

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        v = self.layout.views(params)
        h = x
        for i in range(self.n_layers):
            h = h @ v[f"W{i}"] + v[f"b{i}"]
            if i < self.n_layers - 1:
                np.maximum(h, 0, out=h)
        return h

    def layer_span(self, i: int) -> tuple[int, int]:
        """Where layer i's parameters (W_i then b_i) sit in the flat vector."""
        return self.layout.offsets[f"W{i}"][0], self.layout.offsets[f"b{i}"][1]

    def _block_rows(self, i: int) -> int:
        return max(1, min(self.sizes[i], GRAD_BLOCK_FLOATS // self.sizes[i + 1]))

    def _row_blocks(self, i: int) -> list[tuple[int, int]]:
        a, rows = self.sizes[i], self._block_rows(i)
        return [(r0, min(a, r0 + rows)) for r0 in range(0, a, rows)]

    layerwise = True

    def loss_grad_layerwise(self, params, grad, x, y, rng, apply) -> float:
        return self.loss_grad(params, grad, x, y, rng, apply=apply)

    def max_layer_params(self) -> int:
        """The scratch loss_grad(apply=...) needs: one block of rows of the widest layer."""
        return max(max(self._block_rows(i), 1) * self.sizes[i + 1] for i in range(self.n_layers))

    def loss_grad(self, params, grad, x, y, rng, apply=None) -> float:
        """As Model.loss_grad; with apply(lo, hi, g_part), the gradient is handed over as soon
        as it is known, a block of weight rows at a time (last layer first), and grad need only
        hold one block (max_layer_params(), 512 KB): the optimiser updates block by block and no
        whole-model, or even whole-layer, gradient exists. A layer's weights serve the backward
        pass before any of its blocks is handed over. Both ways compute the weight gradient with
        the same matrix products, block by block (_row_blocks): BLAS picks its kernel and its
        summation order per shape and per CPU, so only the same shapes give the same bits."""
        v = self.layout.views(params)
        g = self.layout.views(grad) if apply is None else None
        masks = self.dropout_masks(x.shape[0], rng)
        acts, pre = [], []
        h = x if masks[0] is None else x * masks[0]
        acts.append(h)
        for i in range(self.n_layers):
            a = h @ v[f"W{i}"] + v[f"b{i}"]
            if i < self.n_layers - 1:
                pre.append(a)
                h = np.maximum(a, 0)
                if masks[i + 1] is not None:
                    h = h * masks[i + 1]
                acts.append(h)
            else:
                h = a
        loss, d = log_softmax_xent(h, y)
        for i in reversed(range(self.n_layers)):
            if apply is None:
                assert g is not None
                gw = g[f"W{i}"]
                for r0, r1 in self._row_blocks(i):
                    np.matmul(acts[i][:, r0:r1].T, d, out=gw[r0:r1])
                d.sum(axis=0, out=g[f"b{i}"])
            d_below = None
            if i > 0:
                d_below = d @ v[f"W{i}"].T
                if masks[i] is not None:
                    d_below *= masks[i]
                d_below *= pre[i - 1] > 0
            if apply is not None:
                self._apply_blocks(i, acts[i], d, grad, apply)
            if d_below is None:
                break
            d = d_below
        return loss

    def _apply_blocks(
        self, i: int, h: np.ndarray, d: np.ndarray, scratch: np.ndarray, apply
    ) -> None:
        a, b = self.sizes[i], self.sizes[i + 1]
        lo = self.layer_span(i)[0]
        for r0, r1 in self._row_blocks(i):
            part = scratch[: (r1 - r0) * b]
            np.matmul(h[:, r0:r1].T, d, out=part.reshape(r1 - r0, b))
            apply(lo + r0 * b, lo + r1 * b, part)
        d.sum(axis=0, out=scratch[:b])
        apply(lo + a * b, lo + a * b + b, scratch[:b])
