"""The named MLP (and logistic regression) in stock onnxruntime: as a standard ONNX model, which
`export` writes and the compiler (compiler/build.py) turns into the training graph that the
onnx backend runs, the same path a user's own model takes. There is no second gradient here:
the backend is the compiled model, on the MLP's flat parameter vector (the compiler lays the
weights out in graph order, W0, b0, W1, ..., as the NumPy MLP does; checked, not assumed).

Dropout: the training graph draws its masks in onnxruntime (the compiler's Dropout rule), so
the two backends see different masks; without dropout they compute the same function."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgegossip.models.base import Model
from edgegossip.models.mlp import MLP


def graph(model: MLP, params: np.ndarray, training: bool = False) -> onnx.ModelProto:
    """The MLP as an exporter writes a model: input `x` [batch, inputs], output `logits`, each
    layer a Gemm on its initializers W_i [in, out] and b_i; with `training`, Dropout in training
    mode where the MLP has it (the input's rate, then each hidden layer's)."""
    v = model.layout.views(params)
    nodes, inits = [], [numpy_helper.from_array(np.array(True), "training")]
    h = "x"
    for i in range(model.n_layers):
        rate = model.dropout_in if i == 0 else model.dropout_hidden
        if training and rate > 0:
            inits.append(numpy_helper.from_array(np.array(rate, np.float32), f"rate{i}"))
            nodes.append(helper.make_node("Dropout", [h, f"rate{i}", "training"], [f"d{i}"]))
            h = f"d{i}"
        for name in (f"W{i}", f"b{i}"):
            inits.append(numpy_helper.from_array(np.ascontiguousarray(v[name]), name))
        out = "logits" if i == model.n_layers - 1 else f"a{i}"
        nodes.append(helper.make_node("Gemm", [h, f"W{i}", f"b{i}"], [out]))
        if out != "logits":
            nodes.append(helper.make_node("Relu", [out], [f"h{i}"]))
            h = f"h{i}"
    g = helper.make_graph(
        nodes,
        "edgegossip_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", model.sizes[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", model.sizes[-1]])],
        [i for i in inits if i.name != "training" or training],
    )
    from edgegossip.compiler.build import OPSET  # the compiler's floor: the oldest runtimes run it

    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.producer_name = "edgegossip"
    return m


def export(model: Model, params: np.ndarray, path: str | Path) -> Path:
    """Write a standard .onnx file: input `x` [batch, 784] (normalised as mnist.normalise),
    outputs `logits` and `probabilities` (softmax)."""
    if not isinstance(model, MLP):
        raise ValueError("ONNX export supports the mlp and logreg models")
    m = graph(model, params)
    m.graph.node.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
    m.graph.output.append(
        helper.make_tensor_value_info(
            "probabilities", TensorProto.FLOAT, ["batch", model.sizes[-1]]
        )
    )
    onnx.checker.check_model(m)
    path = Path(path)
    onnx.save(m, str(path))
    return path


def predict(path: str | Path, x: np.ndarray, output: str = "probabilities") -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run([output], {"x": np.ascontiguousarray(x, np.float32)})[0]


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _compile(source: Path, out: Path) -> None:
    """`model compile` in a forked child: the compiler's imports (onnx's shape inference and
    checker, 40 MB) stay out of the agent, which keeps its memory for the whole run. A fork,
    not a new program: a confined device (emulate/device.py) may not execute one."""
    pid = os.fork()
    if pid == 0:  # the child: compile, and leave without running the parent's exit handlers
        code = 1
        try:
            from edgegossip.compiler.write import compile_file

            compile_file(source, "cross-entropy", out)
            code = 0
        except BaseException as e:  # reported through the exit status and stderr
            os.write(2, f"compiling the MLP failed: {e}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("compiling the MLP for the onnx backend failed (see above)")


class OnnxTrainer:
    """The MLP's loss and gradient in onnxruntime with the NumPy model's interface (loss_grad),
    so the optimizer, the protocols and all-reduce are the same for both backends: the MLP's
    graph compiled at start (compiler/write.py, into a folder of its own) and trained as any
    compiled model is (models/compiled.py)."""

    def __init__(self, model: Model, threads: int = 0):
        """threads: onnxruntime's intra-op threads, 0 one per core (as OpenBLAS does for the
        NumPy backend; one thread made the seed MLP's step 1.5x slower, docs/results.md)."""
        if not isinstance(model, MLP):  # the graph is built from an MLP's layer sizes
            raise ValueError("the onnx backend supports the mlp and logreg models")
        from edgegossip.models.compiled import CompiledModel

        self.model: MLP = model
        self._dir = tempfile.TemporaryDirectory(prefix="edgegossip-mlp-")
        folder = Path(self._dir.name)
        onnx.save(graph(model, model.init(0), training=True), str(folder / "mlp.onnx"))
        _compile(folder / "mlp.onnx", folder / "compiled")
        self.compiled = CompiledModel(folder / "compiled", threads=threads)
        if self.compiled.layout.shapes != model.layout.shapes:
            raise ValueError(
                f"the compiled MLP lays out {self.compiled.layout.shapes}, "
                f"the NumPy MLP {model.layout.shapes}"
            )

    def loss_grad(
        self,
        params: np.ndarray,
        grad: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        rng: np.random.Generator | None,
    ) -> float:
        """Mean loss on (x, y); writes d loss / d params into grad (as Model.loss_grad)."""
        if not (params.flags.c_contiguous and grad.flags.c_contiguous):
            raise ValueError("params and grad must be contiguous float32 vectors")
        return self.compiled.loss_grad(params, grad, x, y, rng)
