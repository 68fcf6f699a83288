"""A small CNN over a flat parameter vector: two convolution + max-pool stages, then dense.

    x [B,1,28,28] -> conv 5x5 (1->8, pad 2) -> relu -> maxpool 2 -> [B,8,14,14]
                  -> conv 5x5 (8->16, pad 2) -> relu -> maxpool 2 -> [B,16,7,7]
                  -> flatten (784) -> dense 784->10 -> cross-entropy

A convolution is a matrix product on unfolded patches (im2col): out = cols(x) @ W^T + b with
cols [B*H*W, C*k*k]; backward is dW = d^T cols, db = sum d, dcols = d W, folded back (col2im).
Max-pool routes the gradient to the arg-max of each window. Kaiming normal init. 11,274 params.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from edgegossip.models.base import FlatLayout, Model, log_softmax_xent

K = 5
PAD = 2


def _im2col(x: np.ndarray) -> np.ndarray:
    """[B,C,H,W] -> [B*H*W, C*K*K] patches of the zero-padded input (same-size output)."""
    B, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)))
    win = sliding_window_view(xp, (K, K), axis=(2, 3))  # [B,C,H,W,K,K]
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(B * H * W, C * K * K)


def _col2im(cols: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    B, C, H, W = shape
    c = cols.reshape(B, H, W, C, K, K)
    xp = np.zeros((B, C, H + 2 * PAD, W + 2 * PAD), cols.dtype)
    for i in range(K):
        for j in range(K):
            xp[:, :, i : i + H, j : j + W] += c[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return xp[:, :, PAD : PAD + H, PAD : PAD + W]


def _pool(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    B, C, H, W = a.shape
    w = (
        a.reshape(B, C, H // 2, 2, W // 2, 2)
        .transpose(0, 1, 2, 4, 3, 5)
        .reshape(B, C, H // 2, W // 2, 4)
    )
    idx = w.argmax(-1)
    return np.take_along_axis(w, idx[..., None], -1)[..., 0], idx


def _unpool(d: np.ndarray, idx: np.ndarray, shape) -> np.ndarray:
    B, C, H, W = shape
    w = np.zeros((B, C, H // 2, W // 2, 4), d.dtype)
    np.put_along_axis(w, idx[..., None], d[..., None], -1)
    return w.reshape(B, C, H // 2, W // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(B, C, H, W)


class CNN(Model):
    def __init__(self, channels: tuple[int, int] = (8, 16), seed: int = 0):
        c1, c2 = channels
        self.c = (1, c1, c2)
        self.layout = FlatLayout(
            [
                ("K0", (c1, 1 * K * K)),
                ("k0", (c1,)),
                ("K1", (c2, c1 * K * K)),
                ("k1", (c2,)),
                ("W", (c2 * 7 * 7, 10)),
                ("b", (10,)),
            ]
        )
        self.seed = seed

    def init(self, seed: int | None = None) -> np.ndarray:
        rng = np.random.default_rng(self.seed if seed is None else seed)
        flat = np.zeros(self.layout.size, np.float32)
        v = self.layout.views(flat)
        for name in ("K0", "K1", "W"):
            fan_in = v[name].shape[1] if name != "W" else v[name].shape[0]
            v[name][...] = rng.standard_normal(v[name].shape, dtype=np.float32) * np.float32(
                np.sqrt(2.0 / fan_in)
            )
        return flat

    def _conv(self, x, Kw, kb):
        B, _, H, W = x.shape
        cols = _im2col(x)
        out = (cols @ Kw.T + kb).reshape(B, H, W, -1).transpose(0, 3, 1, 2)
        return out, cols

    def _forward(self, params, x):
        v = self.layout.views(params)
        x = x.reshape(-1, 1, 28, 28)
        a1, cols1 = self._conv(x, v["K0"], v["k0"])
        r1 = np.maximum(a1, 0)
        p1, i1 = _pool(r1)
        a2, cols2 = self._conv(p1, v["K1"], v["k1"])
        r2 = np.maximum(a2, 0)
        p2, i2 = _pool(r2)
        flat = p2.reshape(len(x), -1)
        logits = flat @ v["W"] + v["b"]
        return logits, (v, x, a1, cols1, r1, p1, i1, a2, cols2, r2, i2, flat)

    def logits(self, params, x):
        return self._forward(params, x)[0]

    def loss_grad(self, params, grad, x, y, rng) -> float:
        logits, (v, x, a1, cols1, r1, p1, i1, a2, cols2, r2, i2, flat) = self._forward(params, x)
        g = self.layout.views(grad)
        loss, d = log_softmax_xent(logits, y)
        np.matmul(flat.T, d, out=g["W"])
        d.sum(axis=0, out=g["b"])
        dp2 = (d @ v["W"].T).reshape(p1.shape[0], self.c[2], 7, 7)
        da2 = _unpool(dp2, i2, r2.shape) * (a2 > 0)
        dm2 = da2.transpose(0, 2, 3, 1).reshape(-1, self.c[2])
        np.matmul(dm2.T, cols2, out=g["K1"])
        dm2.sum(axis=0, out=g["k1"])
        dp1 = _col2im(dm2 @ v["K1"], p1.shape)
        da1 = _unpool(dp1, i1, r1.shape) * (a1 > 0)
        dm1 = da1.transpose(0, 2, 3, 1).reshape(-1, self.c[1])
        np.matmul(dm1.T, cols1, out=g["K0"])
        dm1.sum(axis=0, out=g["k0"])
        return loss
