"""Running the ONNX graphs in stock onnxruntime: export for inference, and a training backend
that takes the same flat parameter and momentum vectors as the NumPy backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from edgegossip.models.base import Model
from edgegossip.models.mlp import MLP
from edgegossip.models.onnx_mlp import grad_graph, inference_graph


def _session(model: onnx.ModelProto, threads: int = 0):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = threads  # 0: one per core, as OpenBLAS does by default
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def export(model: Model, params: np.ndarray, path: str | Path) -> Path:
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
    """The loss and gradient of the MLP in onnxruntime, with the NumPy model's interface
    (loss_grad), so the optimizer, the protocols and all-reduce are the same for both backends.

    Every weight input and gradient output is bound (IOBinding) to its slice of the caller's
    flat parameter and gradient vectors: nothing of the model is copied in or out per step.
    Dropout masks are drawn by the NumPy model (same rng order as its loss_grad)."""

    def __init__(self, model: Model, threads: int = 0):
        if not isinstance(model, MLP):  # the graph below is built from an MLP's layer sizes
            raise ValueError("the onnx backend supports the mlp and logreg models")
        self.model: MLP = model
        self.sess = _session(grad_graph(model), threads)
        self.names = {i.name for i in self.sess.get_inputs()}
        self._io = self.sess.io_binding()
        self._bound: tuple[int, int] | None = None  # (params, grad) addresses bound
        self._loss = np.zeros((), np.float32)
        self._onehot: np.ndarray | None = None

    def _bind_model(self, params: np.ndarray, grad: np.ndarray) -> None:
        key = (params.ctypes.data, grad.ctypes.data)
        if self._bound == key:
            return
        if not (
            params.flags.c_contiguous
            and grad.flags.c_contiguous
            and params.dtype == grad.dtype == np.float32
        ):
            raise ValueError("params and grad must be contiguous float32 vectors")
        pv, gv = self.model.layout.views(params), self.model.layout.views(grad)
        for name, _ in self.model.layout.shapes:
            self._io.bind_input(
                name, "cpu", 0, np.float32, list(pv[name].shape), pv[name].ctypes.data
            )
            self._io.bind_output(
                f"g{name}", "cpu", 0, np.float32, list(gv[name].shape), gv[name].ctypes.data
            )
        self._io.bind_output("loss", "cpu", 0, np.float32, [], self._loss.ctypes.data)
        self._bound = key
        self._keep = (params, grad)  # the bound memory must outlive the binding

    def loss_grad(
        self,
        params: np.ndarray,
        grad: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        rng: np.random.Generator | None,
    ) -> float:
        """Mean loss on (x, y); writes d loss / d params into grad (as Model.loss_grad)."""
        self._bind_model(params, grad)
        n, k = len(y), self.model.sizes[-1]
        if self._onehot is None or self._onehot.shape[0] != n:
            self._onehot = np.zeros((n, k), np.float32)
        onehot = self._onehot
        onehot[:] = 0.0
        onehot[np.arange(n), y] = 1.0
        feed = {"x": np.ascontiguousarray(x, np.float32), "onehot": onehot}
        for i, m in enumerate(self.model.dropout_masks(n, rng)):
            name = f"mask{i}"
            if name in self.names:
                feed[name] = m if m is not None else np.ones((n, self.model.sizes[i]), np.float32)
        for name, arr in feed.items():
            self._io.bind_cpu_input(name, arr)
        self.sess.run_with_iobinding(self._io)
        return float(self._loss)
