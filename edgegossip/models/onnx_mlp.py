"""The MLP (and logistic regression) as standard ONNX graphs for stock onnxruntime.

- inference_graph: logits = MLP(x), weights baked in as initializers; what `export` writes.
- train_step_graph: one whole training step as a graph. Inputs: the flat parameter vector, the
  flat momentum buffer, a batch x, one-hot labels, the scaled dropout keep-masks, lr and mu.
  Outputs: the new flat parameters and momentum, and the loss. The backward pass is written out
  by hand with the same algebra as models/mlp.py (onnxruntime-training is not an option: it
  stopped at 1.19 and imports torch):
      d_logits = (softmax(logits) - onehot) / B
      dW_l = h_{l-1}^T d_l,  db_l = sum_rows d_l,  d_{l-1} = (d_l W_l^T) * mask_{l-1} * [a_{l-1} > 0]
      v <- mu v + g;  x <- x - lr (g + mu v)
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


def _weights(g: _G, model: MLP, flat: str) -> dict[str, str]:
    """Slice and reshape every layer out of the flat parameter input."""
    out = {}
    for name, (a, b, shape) in model.layout.offsets.items():
        sl = g.op("Slice", flat, g.const([a]), g.const([b]), g.const([0]))
        out[name] = g.op("Reshape", sl, g.const(list(shape)))
    return out


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
        g.nodes, "edgegossip_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", model.sizes[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", model.sizes[-1]]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", model.sizes[-1]])],
        g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="edgegossip")
    onnx.checker.check_model(m)
    return m


def train_step_graph(model: MLP) -> onnx.ModelProto:
    g = _G()
    L = model.n_layers
    W = _weights(g, model, "params")
    dropout = [model.dropout_in > 0] + [model.dropout_hidden > 0] * (L - 1)
    # forward, keeping what backward needs
    acts, pre = [], []
    h = g.op("Mul", "x", "mask0") if dropout[0] else "x"
    acts.append(h)
    for i in range(L):
        a = g.op("Add", g.op("MatMul", h, W[f"W{i}"]), W[f"b{i}"])
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
    grads = {}
    for i in reversed(range(L)):
        grads[f"W{i}"] = g.op("MatMul", g.op("Transpose", acts[i], perm=[1, 0]), d)
        grads[f"b{i}"] = g.op("ReduceSum", d, g.const([0]), keepdims=0)
        if i == 0:
            break
        d = g.op("MatMul", d, g.op("Transpose", W[f"W{i}"], perm=[1, 0]))
        if dropout[i]:
            d = g.op("Mul", d, f"mask{i}")
        relu_grad = g.op("Cast", g.op("Greater", pre[i - 1], g.const(0.0, np.float32)),
                         to=TensorProto.FLOAT)
        d = g.op("Mul", d, relu_grad)
    flat_g = g.op("Concat", *[g.op("Reshape", grads[name], g.const([-1]))
                              for name, _ in model.layout.shapes], axis=0)
    # Nesterov momentum, as models/optim.py
    v_new = g.op("Add", g.op("Mul", "momentum", "mu"), flat_g)
    step = g.op("Mul", "lr", g.op("Add", flat_g, g.op("Mul", "mu", v_new)))
    g.nodes.append(helper.make_node("Identity", [v_new], ["momentum_out"]))
    g.nodes.append(helper.make_node("Sub", ["params", step], ["params_out"]))
    n = model.n_params
    inputs = [helper.make_tensor_value_info("params", TensorProto.FLOAT, [n]),
              helper.make_tensor_value_info("momentum", TensorProto.FLOAT, [n]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", model.sizes[0]]),
              helper.make_tensor_value_info("onehot", TensorProto.FLOAT, ["batch", model.sizes[-1]]),
              helper.make_tensor_value_info("lr", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("mu", TensorProto.FLOAT, [])]
    inputs += [helper.make_tensor_value_info(f"mask{i}", TensorProto.FLOAT, ["batch", model.sizes[i]])
               for i in range(L) if dropout[i]]
    outputs = [helper.make_tensor_value_info("params_out", TensorProto.FLOAT, [n]),
               helper.make_tensor_value_info("momentum_out", TensorProto.FLOAT, [n]),
               helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    graph = helper.make_graph(g.nodes, "edgegossip_mlp_train_step", inputs, outputs, g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="edgegossip")
    onnx.checker.check_model(m)
    return m
