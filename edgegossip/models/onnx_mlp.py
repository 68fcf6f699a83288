"""The MLP (and logistic regression) as standard ONNX graphs for stock onnxruntime.

- inference_graph: logits = MLP(x), weights baked in as initializers; what `export` writes.
- grad_graph: the loss and its gradient as a graph. Inputs: every layer's weights and biases
  (W0, b0, ...), a batch x, one-hot labels and the scaled dropout keep-masks. Outputs: the loss
  and every layer's gradient (gW0, gb0, ...). The caller binds each weight input and gradient
  output to its slice of the flat parameter and gradient vectors (onnx_backend.OnnxTrainer), so
  nothing is copied in or out, and applies the same fused Nesterov update as the NumPy backend.
  The backward pass is written out by hand with the same algebra as models/mlp.py
  (onnxruntime-training is not an option: it stopped at 1.19 and imports torch):
      d_logits = (softmax(logits) - onehot) / B
      dW_l = h_{l-1}^T d_l,  db_l = sum_rows d_l,  d_{l-1} = (d_l W_l^T) * mask_{l-1} * [a_{l-1} > 0]
  Transposes are Gemm attributes, never materialised.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgegossip.models.mlp import MLP

OPSET = 17


class _G:
    """A tiny graph builder: every op returns the name of its single output."""

    def __init__(self):
        self.nodes, self.inits, self._n = [], [], 0

    def const(self, value, dtype=np.int64) -> str:
        name = f"c{self._n}"
        self._n += 1
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs) -> str:
        name = f"t{self._n}"
        self._n += 1
        self.nodes.append(helper.make_node(kind, list(inputs), [name], **attrs))
        return name


def inference_graph(model: MLP, params: np.ndarray) -> onnx.ModelProto:
    g = _G()
    v = model.layout.views(params)
    h = "x"
    for i in range(model.n_layers):
        w = g.const(v[f"W{i}"], np.float32)
        b = g.const(v[f"b{i}"], np.float32)
        h = g.op("Add", g.op("MatMul", h, w), b)
        if i < model.n_layers - 1:
            h = g.op("Relu", h)
    g.nodes.append(helper.make_node("Identity", [h], ["logits"]))
    g.nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
    graph = helper.make_graph(
        g.nodes,
        "edgegossip_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", model.sizes[0]])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", model.sizes[-1]]),
            helper.make_tensor_value_info(
                "probabilities", TensorProto.FLOAT, ["batch", model.sizes[-1]]
            ),
        ],
        g.inits,
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edgegossip"
    )
    onnx.checker.check_model(m)
    return m


def _grad_signature(model: MLP, dropout: list[bool]) -> tuple[list, list]:
    """The gradient graph's inputs (every weight, x, the one-hot labels, the dropout masks) and
    outputs (the loss, then each weight's gradient)."""
    L = model.n_layers
    shapes = dict(model.layout.shapes)
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shapes[name]))
        for name, _ in model.layout.shapes
    ]
    inputs += [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", model.sizes[0]]),
        helper.make_tensor_value_info("onehot", TensorProto.FLOAT, ["batch", model.sizes[-1]]),
    ]
    inputs += [
        helper.make_tensor_value_info(f"mask{i}", TensorProto.FLOAT, ["batch", model.sizes[i]])
        for i in range(L)
        if dropout[i]
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    outputs += [
        helper.make_tensor_value_info(f"g{name}", TensorProto.FLOAT, list(shapes[name]))
        for name, _ in model.layout.shapes
    ]
    return inputs, outputs


def grad_graph(model: MLP) -> onnx.ModelProto:
    g = _G()
    L = model.n_layers
    dropout = [model.dropout_in > 0] + [model.dropout_hidden > 0] * (L - 1)
    # forward, keeping what backward needs
    acts, pre = [], []
    h = g.op("Mul", "x", "mask0") if dropout[0] else "x"
    acts.append(h)
    for i in range(L):
        a = g.op("Gemm", h, f"W{i}", f"b{i}")
        if i < L - 1:
            pre.append(a)
            h = g.op("Relu", a)
            if dropout[i + 1]:
                h = g.op("Mul", h, f"mask{i + 1}")
            acts.append(h)
        else:
            h = a
    logp = g.op("LogSoftmax", h, axis=1)
    batch = g.op("Cast", g.op("Gather", g.op("Shape", "x"), g.const(0)), to=TensorProto.FLOAT)
    nll = g.op("Neg", g.op("ReduceSum", g.op("Mul", "onehot", logp), g.const([0, 1]), keepdims=0))
    g.nodes.append(helper.make_node("Div", [nll, batch], ["loss"]))
    # backward
    d = g.op("Div", g.op("Sub", g.op("Exp", logp), "onehot"), batch)
    for i in reversed(range(L)):
        g.nodes.append(helper.make_node("Gemm", [acts[i], d], [f"gW{i}"], transA=1))
        g.nodes.append(helper.make_node("ReduceSum", [d, g.const([0])], [f"gb{i}"], keepdims=0))
        if i == 0:
            break
        d = g.op("Gemm", d, f"W{i}", transB=1)
        if dropout[i]:
            d = g.op("Mul", d, f"mask{i}")
        relu_grad = g.op(
            "Cast", g.op("Greater", pre[i - 1], g.const(0.0, np.float32)), to=TensorProto.FLOAT
        )
        d = g.op("Mul", d, relu_grad)
    inputs, outputs = _grad_signature(model, dropout)
    graph = helper.make_graph(g.nodes, "edgegossip_mlp_grad", inputs, outputs, g.inits)
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edgegossip"
    )
    onnx.checker.check_model(m)
    return m
