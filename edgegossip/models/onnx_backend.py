"""Running the ONNX graphs in stock onnxruntime: export for inference, and a training backend
that takes the same flat parameter and momentum vectors as the NumPy backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from edgegossip.models.mlp import MLP
from edgegossip.models.onnx_mlp import inference_graph, train_step_graph


def _session(model: onnx.ModelProto):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def export(model: MLP, params: np.ndarray, path: str | Path) -> Path:
    """Write a standard .onnx file: input `x` [batch, 784] (normalised as mnist.normalise),
    outputs `logits` and `probabilities` (softmax)."""
    if not isinstance(model, MLP):
        raise ValueError("ONNX export supports the mlp and logreg models")
    path = Path(path)
    onnx.save(inference_graph(model, params), str(path))
    return path


def predict(path: str | Path, x: np.ndarray, output: str = "probabilities") -> np.ndarray:
    sess = _session(onnx.load(str(path)))
    return sess.run([output], {"x": np.ascontiguousarray(x, np.float32)})[0]


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


class OnnxTrainer:
    """One training step per run() of a single graph: forward, loss, backward and the Nesterov
    update. Dropout masks are drawn by the NumPy model (same rng order as its loss_grad)."""

    def __init__(self, model: MLP, lr: float = 0.001, momentum: float = 0.99):
        if not isinstance(model, MLP):
            raise ValueError("the onnx backend supports the mlp and logreg models")
        self.model = model
        self.sess = _session(train_step_graph(model))
        self.lr = np.array(lr, np.float32)
        self.mu = np.array(momentum, np.float32)
        self.names = {i.name for i in self.sess.get_inputs()}

    def step(self, params: np.ndarray, momentum: np.ndarray, x: np.ndarray, y: np.ndarray,
             rng: np.random.Generator | None) -> float:
        """Updates params and momentum in place; returns the batch loss."""
        onehot = np.zeros((len(y), self.model.sizes[-1]), np.float32)
        onehot[np.arange(len(y)), y] = 1.0
        feed = {"params": params, "momentum": momentum, "x": np.ascontiguousarray(x, np.float32),
                "onehot": onehot, "lr": self.lr, "mu": self.mu}
        for i, m in enumerate(self.model.dropout_masks(len(y), rng)):
            name = f"mask{i}"
            if name in self.names:
                feed[name] = m if m is not None else np.ones((len(y), self.model.sizes[i]), np.float32)
        new_p, new_v, loss = self.sess.run(["params_out", "momentum_out", "loss"], feed)
        np.copyto(params, new_p)
        np.copyto(momentum, new_v)
        return float(loss)
