"""Elementwise ops: arithmetic, activations, comparisons' selections (rules of compiler/ops.py)."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from edgegossip.compiler.emit import Emit
from edgegossip.compiler.errors import CompileError
from edgegossip.compiler.table import attr, onnx_type


def add_vjp(e, n, g, s):
    """y = a + b:  ga = g,  gb = g."""
    return [g[0], g[0]]


def sub_vjp(e, n, g, s):
    """y = a - b:  ga = g,  gb = -g."""
    return [g[0], e.op("Neg", g[0])]


def mul_vjp(e, n, g, s):
    """y = a * b:  ga = g b,  gb = g a."""
    a, b = n.input
    return [e.op("Mul", g[0], b), e.op("Mul", g[0], a)]


def div_vjp(e, n, g, s):
    """y = a / b:  ga = g / b,  gb = -g y / b."""
    a, b = n.input
    y = n.output[0]
    return [e.op("Div", g[0], b), e.op("Neg", e.op("Div", e.op("Mul", g[0], y), b))]


def relu_vjp(e, n, g, s):
    """y = max(x, 0):  gx = g where y > 0, else 0, as g * float(y > 0) (onnxruntime's Where
    and Sign each cost about twice these three elementwise ops)."""
    y = n.output[0]
    positive = e.op("Cast", e.op("Greater", y, e.const(0.0, like=y)), to=onnx_type(e, y))
    return [e.op("Mul", g[0], positive)]


def leaky_relu_vjp(e, n, g, s):
    """y = x if x > 0 else alpha x:  gx = g where x > 0, else alpha g."""
    x = n.input[0]
    alpha = attr(n, "alpha", 0.01)
    slope = e.op("Mul", g[0], e.const(alpha, like=x))
    return [e.op("Where", e.op("Greater", x, e.const(0.0, like=x)), g[0], slope)]


def sigmoid_vjp(e, n, g, s):
    """y = 1 / (1 + exp(-x)):  gx = g y (1 - y)."""
    y = n.output[0]
    return [e.op("Mul", g[0], e.op("Mul", y, e.op("Sub", e.const(1.0, like=y), y)))]


def tanh_vjp(e, n, g, s):
    """y = tanh(x):  gx = g (1 - y^2)."""
    y = n.output[0]
    return [e.op("Mul", g[0], e.op("Sub", e.const(1.0, like=y), e.op("Mul", y, y)))]


def identity_vjp(e, n, g, s):
    """y = x:  gx = g."""
    return [g[0]]


def sum_vjp(e, n, g, s):
    """y = x_1 + .. + x_k:  gx_i = g (each summed back to x_i's shape by the driver)."""
    return [g[0]] * len(n.input)


def cast_vjp(e, n, g, s):
    """y = x in another float type (or CastLike's, the type of its second input):  gx = g in
    x's type. A cast to an integer type ends the path: nothing flows back through it."""
    return [e.op("CastLike", g[0], n.input[0])] + [None] * (len(n.input) - 1)


def neg_vjp(e, n, g, s):
    """y = -x:  gx = -g."""
    return [e.op("Neg", g[0])]


def exp_vjp(e, n, g, s):
    """y = exp(x):  gx = g y."""
    return [e.op("Mul", g[0], n.output[0])]


def log_vjp(e, n, g, s):
    """y = log(x):  gx = g / x."""
    return [e.op("Div", g[0], n.input[0])]


def sqrt_vjp(e, n, g, s):
    """y = sqrt(x):  gx = g / (2 y)."""
    y = n.output[0]
    return [e.op("Div", g[0], e.op("Mul", y, e.const(2.0, like=y)))]


def reciprocal_vjp(e, n, g, s):
    """y = 1 / x:  gx = -g y^2."""
    y = n.output[0]
    return [e.op("Neg", e.op("Mul", g[0], e.op("Mul", y, y)))]


def abs_vjp(e, n, g, s):
    """y = |x|:  gx = g sign(x) (0 at 0, as PyTorch)."""
    return [e.op("Mul", g[0], e.op("Sign", n.input[0]))]


def erf_vjp(e, n, g, s):
    """y = erf(x):  gx = g 2 / sqrt(pi) exp(-x^2)."""
    x = n.input[0]
    bell = e.op("Exp", e.op("Neg", e.op("Mul", x, x)))
    return [e.op("Mul", g[0], e.op("Mul", bell, e.const(2.0 / np.sqrt(np.pi), like=x)))]


def sin_vjp(e, n, g, s):
    """y = sin(x):  gx = g cos(x)."""
    return [e.op("Mul", g[0], e.op("Cos", n.input[0]))]


def cos_vjp(e, n, g, s):
    """y = cos(x):  gx = -g sin(x)."""
    return [e.op("Neg", e.op("Mul", g[0], e.op("Sin", n.input[0])))]


def pow_vjp(e, n, g, s):
    """y = a^b, b a constant of the model:  ga = g b a^(b - 1)."""
    a, b = n.input
    less = e.op("Sub", b, e.const(1.0, like=b))
    return [e.op("Mul", g[0], e.op("Mul", b, e.op("Pow", a, less))), None]


def _pick(e: Emit, g: str, where: str, like: str) -> str:
    """g (of the source tensor like's type) where the boolean `where` holds, 0 elsewhere."""
    return e.op("Mul", g, e.op("Cast", where, to=onnx_type(e, like)))


def max_vjp(e, n, g, s):
    """y = max(a, b):  ga = g where a >= b,  gb = g where a < b (a tie goes to a)."""
    a, b = _two(n, "Max")
    y = n.output[0]
    return [
        _pick(e, g[0], e.op("GreaterOrEqual", a, b), y),
        _pick(e, g[0], e.op("Less", a, b), y),
    ]


def min_vjp(e, n, g, s):
    """y = min(a, b):  ga = g where a <= b,  gb = g where a > b (a tie goes to a)."""
    a, b = _two(n, "Min")
    y = n.output[0]
    return [
        _pick(e, g[0], e.op("LessOrEqual", a, b), y),
        _pick(e, g[0], e.op("Greater", a, b), y),
    ]


def _two(n: NodeProto, what: str) -> tuple[str, str]:
    if len(n.input) != 2:
        raise CompileError(f"node {n.name or n.output[0]}: {what} of {len(n.input)} inputs")
    return n.input[0], n.input[1]


def where_vjp(e, n, g, s):
    """y = c ? a : b:  ga = g where c,  gb = g where not c."""
    zero = e.op("Mul", g[0], e.const(0.0, like=n.output[0]))
    c = n.input[0]
    return [None, e.op("Where", c, g[0], zero), e.op("Where", c, zero, g[0])]


def clip_vjp(e, n, g, s):
    """y = min(max(x, lo), hi):  gx = g where lo <= x <= hi (as PyTorch's clamp)."""
    x = n.input[0]
    inside = None
    for k, test in ((1, "GreaterOrEqual"), (2, "LessOrEqual")):
        if len(n.input) > k and n.input[k]:
            bound = e.op(test, x, n.input[k])
            inside = bound if inside is None else e.op("And", inside, bound)
    gx = g[0] if inside is None else _pick(e, g[0], inside, x)
    return [gx] + [None] * (len(n.input) - 1)
