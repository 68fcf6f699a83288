"""BatchNormalization, Dropout and softmax: ops whose training form differs from inference,
and softmax's (rules of compiler/ops.py)."""

from __future__ import annotations

from onnx import NodeProto, helper

from edgegossip.compiler.emit import Emit
from edgegossip.compiler.table import attr, attrs_of, onnx_type


def batchnorm_forward(e: Emit, node: NodeProto) -> dict:
    """Training statistics, as the step computes them: over the batch (and space) axes A,
    mu = mean_A x, var = mean_A (x - mu)^2, xhat = (x - mu) / sqrt(var + eps),
    y = scale xhat + B. The running mean and variance inputs are not used in training; the
    batch's mu and var are outputs of the step, and the trainer keeps the running averages."""
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    rank = len(e.static(x, "BatchNormalization in training"))
    axes = e.const([0] + list(range(2, rank)))
    eps = attr(node, "epsilon", 1e-5)
    mu = e.op("ReduceMean", x, axes, keepdims=1)
    centred = e.op("Sub", x, mu)
    var = e.op("ReduceMean", e.op("Mul", centred, centred), axes, keepdims=1)
    invstd = e.op("Reciprocal", e.op("Sqrt", e.op("Add", var, e.const(eps))))
    xhat = e.op("Mul", centred, invstd)
    shape = e.const([1, -1] + [1] * (rank - 2))
    scaled = e.op("Mul", xhat, e.op("Reshape", scale, shape))
    e.nodes.append(
        helper.make_node("Add", [scaled, e.op("Reshape", bias, shape)], [node.output[0]])
    )
    return {"xhat": xhat, "invstd": invstd, "axes": axes, "shape": shape, "mean": mu, "var": var}


def batchnorm_vjp(e, n, g, s):
    """With xhat, 1/sqrt(var + eps) =: r and the means over A from the forward pass:
    gxhat = g scale;  gx = r (gxhat - mean_A gxhat - xhat mean_A(gxhat xhat));
    gscale = sum_A g xhat;  gB = sum_A g."""
    scale = n.input[1]
    gxhat = e.op("Mul", g[0], e.op("Reshape", scale, s["shape"]))
    m1 = e.op("ReduceMean", gxhat, s["axes"], keepdims=1)
    m2 = e.op("ReduceMean", e.op("Mul", gxhat, s["xhat"]), s["axes"], keepdims=1)
    inner = e.op("Sub", e.op("Sub", gxhat, m1), e.op("Mul", s["xhat"], m2))
    gx = e.op("Mul", s["invstd"], inner)
    gscale = e.op("ReduceSum", e.op("Mul", g[0], s["xhat"]), s["axes"], keepdims=0)
    gbias = e.op("ReduceSum", g[0], s["axes"], keepdims=0)
    return [gx, gscale, gbias, None, None]


def dropout_forward(e: Emit, node: NodeProto) -> dict:
    """Dropout in training mode; its keep-mask is an output the gradient uses."""
    ratio = node.input[1] if len(node.input) > 1 and node.input[1] else e.const(0.5)
    mask = node.output[1] if len(node.output) > 1 and node.output[1] else e.fresh("mask")
    on = e.const(True, dtype=bool)
    e.nodes.append(
        helper.make_node(
            "Dropout", [node.input[0], ratio, on], [node.output[0], mask], **attrs_of(node)
        )
    )
    return {"mask": mask, "ratio": ratio}


def dropout_vjp(e, n, g, s):
    """y = x m / (1 - r), m the keep-mask drawn in the step:  gx = g m / (1 - r)."""
    keep = e.op("Sub", e.const(1.0), s["ratio"])
    masked = e.op("Mul", g[0], e.op("Cast", s["mask"], to=onnx_type(e)))
    return [e.op("Div", masked, keep), None, None]


def softmax_vjp(e, n, g, s):
    """y = softmax(x) along an axis:  gx = y (g - sum_axis(g y))."""
    y = n.output[0]
    axis = e.const([attr(n, "axis", -1)])
    dot = e.op("ReduceSum", e.op("Mul", g[0], y), axis, keepdims=1)
    return [e.op("Mul", y, e.op("Sub", g[0], dot))]


def log_softmax_vjp(e, n, g, s):
    """y = log softmax(x) along an axis:  gx = g - exp(y) sum_axis(g)."""
    y = n.output[0]
    axis = e.const([attr(n, "axis", -1)])
    total = e.op("ReduceSum", g[0], axis, keepdims=1)
    return [e.op("Sub", g[0], e.op("Mul", e.op("Exp", y), total))]
