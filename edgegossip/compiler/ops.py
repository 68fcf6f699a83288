"""The gradient table: for each ONNX op a training graph may hold, which inputs are
differentiable, how the op runs forward in training, and its vector-Jacobian product written in
standard ONNX ops (the math in each rule's docstring). An op outside this table on the path
from a parameter to the loss is refused at compile time.

Notation: y the op's output, g = dL/dy the gradient flowing in, gx = dL/dx what the rule emits;
sum_A sums over axes A. A rule gives one gradient per input; for the slots a row names in
`broadcast` it gives it in the output's shape, and the driver (build._backward) sums it back
over the axes where the input was broadcast, so no rule does that itself.

Each row also carries the graphs that check it (`cases`): tests/test_op_table.py runs every one
against float64 central differences, and a row without one fails; the docs' op list
(docs/ops.md, `python -m edgegossip.reference docs/`) is made from the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from onnx import NodeProto, helper

from edgegossip.compiler.emit import Emit
from edgegossip.compiler.errors import CompileError

Grads = list[str | None]


def attr(node: NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def copy_node(e: Emit, node: NodeProto) -> dict:
    """The forward pass of an op that trains as it infers: the node as it is."""
    e.nodes.append(node)
    return {}


@dataclass(frozen=True)
class Case:
    """A graph that checks a row's rule (tests/test_op_table.py): a batch x [3, *x] through
    `nodes` to the last node's first output, under `loss`; float64, every parameter's gradient
    against central differences (a random op: against its rule with the mask the step drew).
    inits: (name, shape) for a parameter drawn in [low, high], (name, array) for a constant."""

    id: str
    nodes: tuple[tuple[str, tuple[str, ...], tuple[str, ...], dict], ...]
    inits: tuple[tuple[str, tuple[int, ...] | np.ndarray], ...] = ()
    x: tuple[int, ...] = (4,)
    loss: str = "mse"
    low: float = -1.0
    high: float = 1.0
    # what runs the check: onnx's reference evaluator, or onnxruntime (in float64) where the
    # reference is known wrong (its MaxPool indices under padding leave out batch and channel)
    runtime: str = "reference"
    eps: float = 1e-6  # the central difference's step
    rtol: float = 1e-5
    atol: float = 1e-8
    opset: int = 18  # the case model's


def node(spec: str, **attrs) -> tuple[str, tuple[str, ...], tuple[str, ...], dict]:
    """One node of a Case: "Op in1 in2 -> out" ("" for an input left out), its attributes."""
    left, right = spec.split("->")
    op, *inputs = left.split()
    return op, tuple("" if i == '""' else i for i in inputs), tuple(right.split()), attrs


def case(
    id: str,
    *nodes,
    x=(4,),
    loss="mse",
    low=-1.0,
    high=1.0,
    runtime="reference",
    eps=1e-6,
    rtol=1e-5,
    atol=1e-8,
    opset=18,
    **inits,
) -> Case:
    return Case(
        id,
        tuple(nodes),
        tuple(inits.items()),
        tuple(x),
        loss,
        low,
        high,
        runtime,
        eps,
        rtol,
        atol,
        opset,
    )


@dataclass(frozen=True)
class Op:
    """One row of the table: the op's differentiable input slots, its vector-Jacobian product
    (`backward`: one gradient per input, None where none flows), how it runs in a training step
    (`forward`), the slots whose gradient comes out in the output's shape and is summed back to
    the input's by the driver (`broadcast`), and the graphs that check it (`cases`)."""

    diff: tuple[int, ...]  # input slots a gradient flows to (variadic: every one)
    backward: Callable[[Emit, NodeProto, Grads, dict], Grads]
    forward: Callable[[Emit, NodeProto], dict] = field(default=copy_node)
    broadcast: tuple[int, ...] = ()
    cases: tuple[Case, ...] = ()
    random: bool = False  # draws in every step (Dropout): no finite difference can check it
    variadic: bool = False  # any number of inputs, each differentiable (Concat, Sum)

    def slots(self, node: NodeProto) -> tuple[int, ...]:
        return tuple(range(len(node.input))) if self.variadic else self.diff

    def broadcasts(self, node: NodeProto) -> tuple[int, ...]:
        return self.slots(node) if self.variadic and self.broadcast else self.broadcast


# -- elementwise ---------------------------------------------------------------------------------


def _add(e, n, g, s):
    """y = a + b:  ga = g,  gb = g."""
    return [g[0], g[0]]


def _sub(e, n, g, s):
    """y = a - b:  ga = g,  gb = -g."""
    return [g[0], e.op("Neg", g[0])]


def _mul(e, n, g, s):
    """y = a * b:  ga = g b,  gb = g a."""
    a, b = n.input
    return [e.op("Mul", g[0], b), e.op("Mul", g[0], a)]


def _div(e, n, g, s):
    """y = a / b:  ga = g / b,  gb = -g y / b."""
    a, b = n.input
    y = n.output[0]
    return [e.op("Div", g[0], b), e.op("Neg", e.op("Div", e.op("Mul", g[0], y), b))]


def _relu(e, n, g, s):
    """y = max(x, 0):  gx = g where y > 0, else 0, as g * float(y > 0) (onnxruntime's Where
    and Sign each cost about twice these three elementwise ops)."""
    y = n.output[0]
    positive = e.op("Cast", e.op("Greater", y, e.const(0.0, like=y)), to=_onnx_type(e, y))
    return [e.op("Mul", g[0], positive)]


def _leaky_relu(e, n, g, s):
    """y = x if x > 0 else alpha x:  gx = g where x > 0, else alpha g."""
    x = n.input[0]
    alpha = attr(n, "alpha", 0.01)
    slope = e.op("Mul", g[0], e.const(alpha, like=x))
    return [e.op("Where", e.op("Greater", x, e.const(0.0, like=x)), g[0], slope)]


def _sigmoid(e, n, g, s):
    """y = 1 / (1 + exp(-x)):  gx = g y (1 - y)."""
    y = n.output[0]
    return [e.op("Mul", g[0], e.op("Mul", y, e.op("Sub", e.const(1.0, like=y), y)))]


def _tanh(e, n, g, s):
    """y = tanh(x):  gx = g (1 - y^2)."""
    y = n.output[0]
    return [e.op("Mul", g[0], e.op("Sub", e.const(1.0, like=y), e.op("Mul", y, y)))]


def _identity(e, n, g, s):
    """y = x:  gx = g."""
    return [g[0]]


# -- shape ---------------------------------------------------------------------------------------


def _reshape_back(e, n, g, s):
    """y = x with another shape (Reshape, Flatten, Squeeze, Unsqueeze):  gx = g in x's shape."""
    return [e.op("Reshape", g[0], e.op("Shape", n.input[0]))] + [None] * (len(n.input) - 1)


def _transpose(e, n, g, s):
    """y = x permuted by p:  gx = g permuted by p's inverse."""
    perm = attr(n, "perm") or list(reversed(range(len(e.shape(n.input[0]) or []))))
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [e.op("Transpose", g[0], perm=inverse)]


def _concat(e, n, g, s):
    """y = concat(x_1 .. x_k) along an axis:  gx_i = the slice of g where x_i was."""
    axis = attr(n, "axis")
    sizes = []
    for x in n.input:
        dims = e.shape(x)
        if dims is None or dims[axis] is None:
            raise CompileError(f"node {n.name or n.output[0]}: Concat needs {x!r}'s size there")
        sizes.append(int(dims[axis]))
    return list(e.op_n("Split", g[0], e.const(sizes), axis=axis, n_out=len(sizes)))


def _reduce_axes(e: Emit, n: NodeProto, what: str) -> list[int]:
    """The axes a reduction (opset 18: its second input) runs over, non-negative."""
    rank = len(e.static(n.input[0], what))
    if len(n.input) > 1 and n.input[1]:
        if n.input[1] not in e.values:
            raise CompileError(f"node {n.name or n.output[0]}: {what} needs constant axes")
        axes = [int(a) for a in np.ravel(e.values[n.input[1]])]
    else:
        axes = []
    if not axes:
        if attr(n, "noop_with_empty_axes", 0):
            return []
        axes = list(range(rank))
    return sorted(a % rank for a in axes)


def _spread(e: Emit, n: NodeProto, g: str, axes: list[int]) -> str:
    """g of a reduction's output, as x's shape: unsqueezed where keepdims dropped the axes,
    then repeated over them."""
    if not attr(n, "keepdims", 1) and axes:
        g = e.op("Unsqueeze", g, e.const(axes))
    return e.op("Expand", g, e.op("Shape", n.input[0]))


def _reduce_sum(e, n, g, s):
    """y = sum_A x:  gx = g repeated over A."""
    axes = _reduce_axes(e, n, "ReduceSum's gradient")
    return [_spread(e, n, g[0], axes), None]


def _reduce_mean(e, n, g, s):
    """y = mean_A x:  gx = g / |A| repeated over A."""
    axes = _reduce_axes(e, n, "ReduceMean's gradient")
    dims = e.static(n.input[0], "ReduceMean's gradient")
    count = float(np.prod([dims[a] for a in axes])) if axes else 1.0
    return [_spread(e, n, e.op("Div", g[0], e.const(count, like=n.output[0])), axes), None]


# -- linear --------------------------------------------------------------------------------------


def _gemm(e, n, g, s):
    """y = alpha A' B' + beta C, A' = A or A^T (transA), B' = B or B^T (transB):
    gA' = alpha g B'^T, gB' = alpha A'^T g (transposed back where the input was),
    gC = beta g (summed back to C's shape by the driver)."""
    a, b = n.input[0], n.input[1]
    ta, tb = attr(n, "transA", 0), attr(n, "transB", 0)
    alpha, beta = attr(n, "alpha", 1.0), attr(n, "beta", 1.0)
    k = {} if alpha == 1.0 else {"alpha": alpha}
    if not ta:
        ga = e.op("Gemm", g[0], b, transB=0 if tb else 1, **k)
    else:
        ga = e.op("Gemm", b, g[0], transA=1 if tb else 0, transB=1, **k)
    if not tb:
        gb = e.op("Gemm", a, g[0], transA=0 if ta else 1, **k)
    else:
        gb = e.op("Gemm", g[0], a, transA=1, transB=1 if ta else 0, **k)
    out: Grads = [ga, gb]
    if len(n.input) > 2 and n.input[2]:
        out.append(g[0] if beta == 1.0 else e.op("Mul", g[0], e.const(beta)))
    return out


def _swap_last(e: Emit, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return e.op("Transpose", x, perm=perm)


def _matmul(e, n, g, s):
    """y = A B (A [..., M, K], B [K, N] or batched like A):  gA = g B^T;
    gB = A^T g summed over A's batch dims (as [-1, K]^T [-1, N] for a 2-D B; a batched B's
    is summed back over the dims it was broadcast on)."""
    a, b = n.input
    ra, rb = len(e.shape(a) or []), len(e.shape(b) or [])
    if ra < 2 or rb < 2:
        raise CompileError(f"node {n.name or n.output[0]}: MatMul of a vector is not supported")
    ga = e.op("MatMul", g[0], _swap_last(e, b, rb))
    if rb == 2:
        k, m = e.static(b, "MatMul's gradient")
        a2 = e.op("Reshape", a, e.const([-1, k]))
        g2 = e.op("Reshape", g[0], e.const([-1, m]))
        gb = e.op("Gemm", a2, g2, transA=1)
    else:
        gb = e.unbroadcast(e.op("MatMul", _swap_last(e, a, ra), g[0]), b, n.output[0])
    return [ga, gb]


# -- convolution and pooling ---------------------------------------------------------------------


def _conv_geometry(e: Emit, n: NodeProto, what: str):
    if attr(n, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise CompileError(f"node {n.name or n.output[0]}: {what} with auto_pad is not supported")
    x, y = e.static(n.input[0], what), e.static(n.output[0], what)
    nd = len(x) - 2
    strides = list(attr(n, "strides", [1] * nd))
    pads = list(attr(n, "pads", [0] * (2 * nd)))
    dil = list(attr(n, "dilations", [1] * nd))
    return x, y, nd, strides, pads, dil


def _output_padding(x, y, nd, strides, pads, dil, kernel) -> list[int]:
    """What ConvTranspose must add so that it gives back x's spatial size from y's."""
    out = []
    for i in range(nd):
        full = strides[i] * (y[2 + i] - 1) + dil[i] * (kernel[i] - 1) + 1 - pads[i] - pads[nd + i]
        out.append(x[2 + i] - full)
    return out


def _conv(e, n, g, s):
    """y = conv(x, W) + b, stride s, pads p, dilation d, groups G (1-D and 2-D):
    gx = conv_transpose(g, W) with the same s, p, d, G (and the output padding that gives back
    x's size); gW, per group, = conv(x^T, g^T) with stride d and dilation s, where ^T swaps the
    batch and channel axes, cut to W's kernel size; gb = sum over batch and space of g."""
    x, w = n.input[0], n.input[1]
    xs, ys, nd, strides, pads, dil = _conv_geometry(e, n, "Conv's gradient")
    ws = e.static(w, "Conv's gradient")
    groups = attr(n, "group", 1)
    kernel = ws[2:]
    extra = _output_padding(xs, ys, nd, strides, pads, dil, kernel)
    geo = {"strides": strides, "pads": pads, "dilations": dil, "output_padding": extra}
    swap = [1, 0] + list(range(2, 2 + nd))
    xg = _groups(e, x, xs[1], groups)
    gg = _groups(e, g[0], ys[1], groups)
    wg = _groups(e, w, ws[0], groups, axis=0)
    # group by group (a grouped ConvTranspose is not in every runtime's kernels)
    gxs = [e.op("ConvTranspose", gi, wi, **geo) for gi, wi in zip(gg, wg)]
    gx = gxs[0] if groups == 1 else e.op("Concat", *gxs, axis=1)
    parts = []
    for xi, gi in zip(xg, gg):
        full = e.op(
            "Conv",
            e.op("Transpose", xi, perm=swap),
            e.op("Transpose", gi, perm=swap),
            strides=dil,
            dilations=strides,
            pads=pads,
        )
        cut = e.op(
            "Slice", full, e.const([0] * nd), e.const(kernel), e.const(list(range(2, 2 + nd)))
        )
        parts.append(e.op("Transpose", cut, perm=swap))
    gw = parts[0] if groups == 1 else e.op("Concat", *parts, axis=0)
    out: Grads = [gx, gw]
    if len(n.input) > 2 and n.input[2]:
        out.append(e.reduce_sum(g[0], [0] + list(range(2, 2 + nd)), keepdims=0))
    return out


def _groups(e: Emit, t: str, size: int, groups: int, axis: int = 1) -> list[str]:
    if groups == 1:
        return [t]
    return e.op_n("Split", t, e.const([size // groups] * groups), axis=axis, n_out=groups)


def _tiles(e: Emit, node: NodeProto) -> tuple[list[int], list[int]] | None:
    """(x's dims, the window) when MaxPool's windows tile x: window = strides, no padding or
    dilation, floor mode; else None (the general rule then scatters to MaxPool's indices)."""
    dims = e.shape(node.input[0])
    if not dims or any(d is None for d in dims[1:]) or len(node.output) > 1:
        return None
    nd = len(dims) - 2
    kernel = list(attr(node, "kernel_shape", []))
    tiled = (
        list(attr(node, "strides", [1] * nd)) == kernel
        and not any(attr(node, "pads", [0]))
        and set(attr(node, "dilations", [1] * nd)) == {1}
        and not attr(node, "ceil_mode", 0)
        and attr(node, "auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
        and attr(node, "storage_order", 0) == 0
    )
    return ([int(d or 0) for d in dims[1:]], kernel) if tiled else None  # known: checked above


def _maxpool_forward(e: Emit, node: NodeProto) -> dict:
    """Tiling windows: MaxPool as it is (its gradient compares x with y). Otherwise MaxPool also
    gives the flat indices of its maxima, which its gradient scatters to (several times slower
    in onnxruntime than MaxPool alone)."""
    if _tiles(e, node):
        return copy_node(e, node)
    idx = node.output[1] if len(node.output) > 1 and node.output[1] else e.fresh("argmax")
    e.nodes.append(
        helper.make_node(
            "MaxPool", list(node.input), [node.output[0], idx], name=node.name, **_attrs(node)
        )
    )
    return {"indices": idx}


def _maxpool(e, n, g, s):
    """y = max of x over each window:  gx = g at each window's first maximum (in row-major
    order, as MaxPool's indices and PyTorch choose), 0 elsewhere. Windows that tile x, with
    up(t) a window's value spread over the window (Resize, nearest): hit = [x = up(y)];
    ranked = hit * rank, rank falling from K to 1 along each window; gx = up(g) where
    ranked = up(maxpool(ranked)), zero-padded over rows no window reaches. Other windows: g
    added at MaxPool's argmax (ScatterElements, reduction add, over x flattened; windows that
    overlap add up)."""
    if "indices" not in s:
        return [_tiled_pool_grad(e, n, g[0])]
    x = n.input[0]
    flat = e.op("Reshape", x, e.const([-1]))
    zeros = e.op("Mul", flat, e.const(0.0))
    idx = e.op("Reshape", s["indices"], e.const([-1]))
    scattered = e.op(
        "ScatterElements", zeros, idx, e.op("Reshape", g[0], e.const([-1])), reduction="add"
    )
    return [e.op("Reshape", scattered, e.op("Shape", x))]


def _tiled_pool_grad(e: Emit, n: NodeProto, g: str) -> str:
    tiles = _tiles(e, n)
    assert tiles is not None
    (_, *space), kernel = tiles
    nd = len(kernel)
    covered = [size // k * k for size, k in zip(space, kernel)]
    x = n.input[0]
    if covered != space:  # rows and columns no window reaches
        x = e.op("Slice", x, e.const([0] * nd), e.const(covered), e.const(list(range(2, 2 + nd))))
    scales = e.const([1.0, 1.0] + [float(k) for k in kernel], np.float32)  # always float

    def up(t: str) -> str:  # each window's value over the whole window
        return e.op(
            "Resize",
            t,
            "",
            scales,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )

    cast = _onnx_type(e)
    hit = e.op("Cast", e.op("Equal", x, up(n.output[0])), to=cast)
    ranked = e.op("Mul", hit, e.const(_window_rank(kernel, covered)))
    best = e.op("MaxPool", ranked, kernel_shape=kernel, strides=kernel)
    first = e.op("Cast", e.op("Equal", ranked, up(best)), to=cast)
    gx = e.op("Mul", first, up(g))
    if covered != space:
        rest = [size - c for size, c in zip(space, covered)]
        gx = e.op("Pad", gx, e.const([0] * (2 + nd) + [0, 0] + rest))
    return gx


def _window_rank(kernel: list[int], covered: list[int]) -> np.ndarray:
    """[1, 1, *covered]: K at each window's first element in row-major order, down to 1 at
    its last, so the largest rank among a window's maxima marks the first of them."""
    inside = np.arange(int(np.prod(kernel)), 0, -1, dtype=np.float64).reshape(kernel)
    reps = [c // k for c, k in zip(covered, kernel)]
    return np.tile(inside, reps)[None, None]


def _avgpool(e, n, g, s):
    """y = mean of x over each window of k (padding counted, or no padding):
    gx = conv_transpose(g, ones(k) / |k|) channel by channel (groups = C)."""
    xs, ys, nd, strides, pads, dil = _conv_geometry(e, n, "AveragePool's gradient")
    kernel = list(attr(n, "kernel_shape"))
    if any(pads) and not attr(n, "count_include_pad", 0):
        raise CompileError(
            f"node {n.name or n.output[0]}: AveragePool with pads needs count_include_pad=1"
        )
    if attr(n, "ceil_mode", 0):
        raise CompileError(f"node {n.name or n.output[0]}: AveragePool with ceil_mode=1")
    c = xs[1]
    size = int(np.prod(kernel))
    w = e.const(np.full([c, 1, *kernel], 1.0 / size))
    extra = _output_padding(xs, ys, nd, strides, pads, [1] * nd, kernel)
    return [
        e.op("ConvTranspose", g[0], w, group=c, strides=strides, pads=pads, output_padding=extra)
    ]


def _global_avgpool(e, n, g, s):
    """y = mean of x over all space:  gx = g / |space|, repeated over space."""
    x = n.input[0]
    xs = e.static(x, "GlobalAveragePool's gradient")
    size = 1
    for d in xs[2:]:
        size *= d
    return [e.op("Expand", e.op("Div", g[0], e.const(float(size))), e.op("Shape", x))]


# -- normalisation, dropout, softmax -------------------------------------------------------------


def _batchnorm_forward(e: Emit, node: NodeProto) -> dict:
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


def _batchnorm(e, n, g, s):
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


def _dropout_forward(e: Emit, node: NodeProto) -> dict:
    """Dropout in training mode; its keep-mask is an output the gradient uses."""
    ratio = node.input[1] if len(node.input) > 1 and node.input[1] else e.const(0.5)
    mask = node.output[1] if len(node.output) > 1 and node.output[1] else e.fresh("mask")
    on = e.const(True, dtype=bool)
    e.nodes.append(
        helper.make_node(
            "Dropout", [node.input[0], ratio, on], [node.output[0], mask], **_attrs(node)
        )
    )
    return {"mask": mask, "ratio": ratio}


def _dropout(e, n, g, s):
    """y = x m / (1 - r), m the keep-mask drawn in the step:  gx = g m / (1 - r)."""
    keep = e.op("Sub", e.const(1.0), s["ratio"])
    masked = e.op("Mul", g[0], e.op("Cast", s["mask"], to=_onnx_type(e)))
    return [e.op("Div", masked, keep), None, None]


def _softmax(e, n, g, s):
    """y = softmax(x) along an axis:  gx = y (g - sum_axis(g y))."""
    y = n.output[0]
    axis = e.const([attr(n, "axis", -1)])
    dot = e.op("ReduceSum", e.op("Mul", g[0], y), axis, keepdims=1)
    return [e.op("Mul", y, e.op("Sub", g[0], dot))]


def _log_softmax(e, n, g, s):
    """y = log softmax(x) along an axis:  gx = g - exp(y) sum_axis(g)."""
    y = n.output[0]
    axis = e.const([attr(n, "axis", -1)])
    total = e.op("ReduceSum", g[0], axis, keepdims=1)
    return [e.op("Sub", g[0], e.op("Mul", e.op("Exp", y), total))]


# -- more elementwise -------------------------------------------------------------------------


def _sum(e, n, g, s):
    """y = x_1 + .. + x_k:  gx_i = g (each summed back to x_i's shape by the driver)."""
    return [g[0]] * len(n.input)


def _cast(e, n, g, s):
    """y = x in another float type (or CastLike's, the type of its second input):  gx = g in
    x's type. A cast to an integer type ends the path: nothing flows back through it."""
    return [e.op("CastLike", g[0], n.input[0])] + [None] * (len(n.input) - 1)


def _neg(e, n, g, s):
    """y = -x:  gx = -g."""
    return [e.op("Neg", g[0])]


def _exp(e, n, g, s):
    """y = exp(x):  gx = g y."""
    return [e.op("Mul", g[0], n.output[0])]


def _log(e, n, g, s):
    """y = log(x):  gx = g / x."""
    return [e.op("Div", g[0], n.input[0])]


def _sqrt(e, n, g, s):
    """y = sqrt(x):  gx = g / (2 y)."""
    y = n.output[0]
    return [e.op("Div", g[0], e.op("Mul", y, e.const(2.0, like=y)))]


def _reciprocal(e, n, g, s):
    """y = 1 / x:  gx = -g y^2."""
    y = n.output[0]
    return [e.op("Neg", e.op("Mul", g[0], e.op("Mul", y, y)))]


def _abs(e, n, g, s):
    """y = |x|:  gx = g sign(x) (0 at 0, as PyTorch)."""
    return [e.op("Mul", g[0], e.op("Sign", n.input[0]))]


def _erf(e, n, g, s):
    """y = erf(x):  gx = g 2 / sqrt(pi) exp(-x^2)."""
    x = n.input[0]
    bell = e.op("Exp", e.op("Neg", e.op("Mul", x, x)))
    return [e.op("Mul", g[0], e.op("Mul", bell, e.const(2.0 / np.sqrt(np.pi), like=x)))]


def _sin(e, n, g, s):
    """y = sin(x):  gx = g cos(x)."""
    return [e.op("Mul", g[0], e.op("Cos", n.input[0]))]


def _cos(e, n, g, s):
    """y = cos(x):  gx = -g sin(x)."""
    return [e.op("Neg", e.op("Mul", g[0], e.op("Sin", n.input[0])))]


def _pow(e, n, g, s):
    """y = a^b, b a constant of the model:  ga = g b a^(b - 1)."""
    a, b = n.input
    less = e.op("Sub", b, e.const(1.0, like=b))
    return [e.op("Mul", g[0], e.op("Mul", b, e.op("Pow", a, less))), None]


def _pick(e: Emit, g: str, where: str, like: str) -> str:
    """g (of the source tensor like's type) where the boolean `where` holds, 0 elsewhere."""
    return e.op("Mul", g, e.op("Cast", where, to=_onnx_type(e, like)))


def _max(e, n, g, s):
    """y = max(a, b):  ga = g where a >= b,  gb = g where a < b (a tie goes to a)."""
    a, b = _two(n, "Max")
    y = n.output[0]
    return [
        _pick(e, g[0], e.op("GreaterOrEqual", a, b), y),
        _pick(e, g[0], e.op("Less", a, b), y),
    ]


def _min(e, n, g, s):
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


def _where(e, n, g, s):
    """y = c ? a : b:  ga = g where c,  gb = g where not c."""
    zero = e.op("Mul", g[0], e.const(0.0, like=n.output[0]))
    c = n.input[0]
    return [None, e.op("Where", c, g[0], zero), e.op("Where", c, zero, g[0])]


def _clip(e, n, g, s):
    """y = min(max(x, lo), hi):  gx = g where lo <= x <= hi (as PyTorch's clamp)."""
    x = n.input[0]
    inside = None
    for k, test in ((1, "GreaterOrEqual"), (2, "LessOrEqual")):
        if len(n.input) > k and n.input[k]:
            bound = e.op(test, x, n.input[k])
            inside = bound if inside is None else e.op("And", inside, bound)
    gx = g[0] if inside is None else _pick(e, g[0], inside, x)
    return [gx] + [None] * (len(n.input) - 1)


# -- indexing and layout -------------------------------------------------------------------------


def _expand(e, n, g, s):
    """y = x broadcast to a shape:  gx = g, summed back to x's shape by the driver."""
    return [g[0], None]


def _constant_input(e: Emit, n: NodeProto, k: int, what: str) -> list[int] | None:
    if len(n.input) <= k or not n.input[k]:
        return None
    if n.input[k] not in e.values:
        raise CompileError(f"node {n.name or n.output[0]}: {what} needs constant inputs")
    return [int(v) for v in np.ravel(e.values[n.input[k]])]


def _slice(e, n, g, s):
    """y = x[starts:ends] along axes, step 1:  gx = g padded with zeros back to x's size."""
    dims = e.static(n.input[0], "Slice's gradient")
    rank = len(dims)
    starts = _constant_input(e, n, 1, "Slice's gradient") or []
    ends = _constant_input(e, n, 2, "Slice's gradient") or []
    axes = _constant_input(e, n, 3, "Slice's gradient") or list(range(len(starts)))
    steps = _constant_input(e, n, 4, "Slice's gradient") or [1] * len(starts)
    if any(st != 1 for st in steps):
        raise CompileError(f"node {n.name or n.output[0]}: Slice with a step other than 1")
    pads = [0] * (2 * rank)
    for a, lo, hi in zip(axes, starts, ends):
        a %= rank
        if a == 0:
            raise CompileError(f"node {n.name or n.output[0]}: Slice of the batch axis")
        size = dims[a]
        lo = min(max(lo + size if lo < 0 else lo, 0), size)
        hi = min(max(hi + size if hi < 0 else hi, 0), size)
        pads[a], pads[rank + a] = lo, size - max(hi, lo)
    return [e.op("Pad", g[0], e.const(pads))] + [None] * (len(n.input) - 1)


def _pad(e, n, g, s):
    """y = x padded with a constant (pads p_begin, p_end, non-negative):  gx = the slice of g
    where x was."""
    if attr(n, "mode", b"constant") not in (b"constant", "constant"):
        raise CompileError(f"node {n.name or n.output[0]}: Pad in a mode other than constant")
    pads = _constant_input(e, n, 1, "Pad's gradient") or []
    if len(n.input) > 3 and n.input[3]:
        raise CompileError(f"node {n.name or n.output[0]}: Pad with axes")
    rank = len(pads) // 2
    if any(p < 0 for p in pads):
        raise CompileError(f"node {n.name or n.output[0]}: Pad with negative pads")
    ends = [-p if p else np.iinfo(np.int64).max for p in pads[rank:]]
    cut = e.op("Slice", g[0], e.const(pads[:rank]), e.const(ends), e.const(list(range(rank))))
    return [cut] + [None] * (len(n.input) - 1)


def _split(e, n, g, s):
    """y_1 .. y_k = pieces of x along an axis:  gx = concat(g_1 .. g_k), a piece whose gradient
    is none counting as zeros."""
    axis = attr(n, "axis", 0)
    parts = [
        gi if gi is not None else e.op("Mul", y, e.const(0.0, like=y)) for gi, y in zip(g, n.output)
    ]
    return [e.op("Concat", *parts, axis=axis)] + [None] * (len(n.input) - 1)


def _gather(e, n, g, s):
    """y = data[indices] along axis 0 (an embedding's lookup):  gdata = zeros of data's shape
    with g added at each index (ScatterND, reduction add: an id used twice gets both)."""
    if attr(n, "axis", 0) != 0:
        raise CompileError(
            f"node {n.name or n.output[0]}: Gather's gradient along an axis other than 0"
        )
    data, idx = n.input
    dims = e.static(data, "Gather's gradient")
    zeros = e.op("Mul", data, e.const(0.0, like=data))
    flat = e.op("Reshape", idx, e.const([-1, 1]))
    rows = e.op("Reshape", g[0], e.const([-1, *dims[1:]]))
    return [e.op("ScatterND", zeros, flat, rows, reduction="add"), None]


def _none(e, n, g, s):
    """No gradient: the output is an integer or a boolean (a shape, a comparison, an index)."""
    return [None] * len(n.input)


def _attrs(node: NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _onnx_type(e: Emit, like: str | None = None) -> int:
    """The graph's float type as ONNX names it (or that of the source tensor `like`)."""
    return helper.np_dtype_to_tensor_dtype(e.types.get(like, e.dtype) if like else e.dtype)


def _unary(op: str, **attrs) -> tuple[Case, ...]:
    """The case of an elementwise op of one input: on a parameter times the batch."""
    return (case(op, node("Mul x W -> h"), node(f"{op} h -> z", **attrs), W=(4,)),)


def _binary(op: str, low: float = -1.0) -> tuple[Case, ...]:
    """An elementwise op of two inputs, broadcast every way a model broadcasts it."""
    return (
        case("x, W [4]", node(f"{op} x W -> z"), W=(4,), low=low),
        case("W [1, 4], x", node(f"{op} W x -> z"), W=(1, 4), low=low),
        case("W [3, 1, 4], x", node(f"{op} W x -> z"), W=(3, 1, 4), low=low),
        case("x, W [1]", node(f"{op} x W -> z"), W=(1,), low=low),
    )


_AX = np.array([1], np.int64)


def _pooled(op: str, id: str, **attrs) -> Case:
    """A pooling op after a padded convolution of a 2-channel 5x5 batch."""
    return case(
        id,
        node("Conv x W B -> h", pads=[1, 1, 1, 1]),
        node(f"{op} h -> z", **attrs),
        x=(2, 5, 5),
        W=(3, 2, 3, 3),
        B=(3,),
    )


OPS: dict[str, Op] = {
    "Add": Op((0, 1), _add, broadcast=(0, 1), cases=_binary("Add")),
    "Sub": Op((0, 1), _sub, broadcast=(0, 1), cases=_binary("Sub")),
    "Mul": Op((0, 1), _mul, broadcast=(0, 1), cases=_binary("Mul")),
    "Div": Op((0, 1), _div, broadcast=(0, 1), cases=_binary("Div", low=1.0)),
    "Relu": Op((0,), _relu, cases=_unary("Relu")),
    "LeakyRelu": Op((0,), _leaky_relu, cases=_unary("LeakyRelu", alpha=0.1)),
    "Sigmoid": Op((0,), _sigmoid, cases=_unary("Sigmoid")),
    "Tanh": Op((0,), _tanh, cases=_unary("Tanh")),
    "Identity": Op((0,), _identity, cases=_unary("Identity")),
    "Flatten": Op(
        (0,),
        _reshape_back,
        cases=(
            case(
                "axis 1", node("Mul x W -> h"), node("Flatten h -> z", axis=1), x=(2, 4), W=(2, 4)
            ),
        ),
    ),
    "Reshape": Op(
        (0,),
        _reshape_back,
        cases=(
            case(
                "to [batch, 8]",
                node("Mul x W -> h"),
                node("Reshape h shape -> z"),
                x=(2, 4),
                W=(2, 4),
                shape=np.array([0, 8], np.int64),
            ),
        ),
    ),
    "Squeeze": Op(
        (0,),
        _reshape_back,
        cases=(
            case(
                "axis 1",
                node("Mul x W -> h"),
                node("Squeeze h ax -> z"),
                x=(1, 4),
                W=(1, 4),
                ax=_AX,
            ),
        ),
    ),
    "Unsqueeze": Op(
        (0,),
        _reshape_back,
        cases=(case("axis 1", node("Mul x W -> h"), node("Unsqueeze h ax -> z"), W=(4,), ax=_AX),),
    ),
    "Transpose": Op(
        (0,),
        _transpose,
        cases=(
            case(
                "perm 0 2 1",
                node("Mul x W -> h"),
                node("Transpose h -> z", perm=[0, 2, 1]),
                x=(2, 4),
                W=(2, 4),
            ),
        ),
    ),
    "Concat": Op(
        (),
        _concat,
        variadic=True,
        cases=(
            case(
                "two branches",
                node("Mul x W -> h"),
                node("Mul x V -> k"),
                node("Concat h k -> z", axis=1),
                W=(4,),
                V=(4,),
            ),
        ),
    ),
    "Gemm": Op(
        (0, 1, 2),
        _gemm,
        broadcast=(2,),
        cases=(
            case("as nn.Linear", node("Gemm x W b -> z", transB=1), W=(5, 4), b=(5,)),
            case(
                "transA, alpha, beta",
                node("Transpose x -> xT", perm=[1, 0]),
                node("Gemm A xT C -> z", transA=1, alpha=0.5, beta=2.0),
                A=(4, 5),
                C=(5, 1),
            ),
            case(
                "A, transB",
                node("Gemm A x C -> z", transB=1, alpha=0.5, beta=2.0),
                A=(5, 4),
                C=(5, 1),
            ),
            case(
                "transA, transB",
                node("Gemm A x C -> z", transA=1, transB=1, beta=2.0),
                A=(4, 5),
                C=(5, 1),
            ),
            case(
                "under cross-entropy",
                node("Gemm x W b -> z", transB=1),
                node("Softmax z -> p", axis=1),
                loss="cross-entropy",
                W=(5, 4),
                b=(5,),
            ),
        ),
    ),
    "MatMul": Op(
        (0, 1),
        _matmul,
        cases=(
            case("[batch, 4] [4, 5]", node("MatMul x W -> z"), W=(4, 5)),
            case("[batch, 2, 4] [4, 5]", node("MatMul x W -> z"), x=(2, 4), W=(4, 5)),
            case("batched B [1, 4, 5]", node("MatMul x W -> z"), x=(2, 4), W=(1, 4, 5)),
        ),
    ),
    "Conv": Op(
        (0, 1, 2),
        _conv,
        cases=(
            case(
                "2-D, stride 2, pads 1",
                node("Conv x W B -> z", strides=[2, 2], pads=[1, 1, 1, 1]),
                x=(2, 5, 5),
                W=(4, 2, 3, 3),
                B=(4,),
            ),
            case(
                "2-D, groups 2, no bias",
                node("Conv x W -> z", group=2),
                x=(4, 4, 4),
                W=(4, 2, 2, 2),
            ),
            case(
                "1-D, dilation 2, groups 2",
                node("Conv x W B -> z", group=2, dilations=[2]),
                x=(2, 7),
                W=(2, 1, 3),
                B=(2,),
            ),
            case(
                "1-D, stride 3, pads 2 0",
                node("Conv x W B -> z", strides=[3], pads=[2, 0]),
                x=(1, 8),
                W=(3, 1, 2),
                B=(3,),
            ),
        ),
    ),
    "MaxPool": Op(
        (0,),
        _maxpool,
        _maxpool_forward,
        cases=(
            _pooled("MaxPool", "tiling 2x2", kernel_shape=[2, 2], strides=[2, 2]),
            case(
                "3x3, stride 1, pads 1",
                node("Mul x W -> h"),
                node("MaxPool h -> z", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
                x=(2, 5, 5),
                W=(2, 5, 5),
                runtime="onnxruntime",
            ),
            case(
                "1-D tiling with a remainder",
                node("Mul x W -> h"),
                node("MaxPool h -> z", kernel_shape=[2], strides=[2]),
                x=(1, 7),
                W=(1, 7),
            ),
        ),
    ),
    "AveragePool": Op(
        (0,),
        _avgpool,
        cases=(
            _pooled("AveragePool", "2x2, stride 2", kernel_shape=[2, 2], strides=[2, 2]),
            _pooled(
                "AveragePool",
                "3x3, stride 2, pads 1",
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
                count_include_pad=1,
            ),
        ),
    ),
    "GlobalAveragePool": Op((0,), _global_avgpool, cases=(_pooled("GlobalAveragePool", "2-D"),)),
    "ReduceSum": Op(
        (0,),
        _reduce_sum,
        cases=(
            case(
                "axis 1, keepdims 0",
                node("Mul x W -> h"),
                node("ReduceSum h ax -> z", keepdims=0),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
            case(
                "axis 1, keepdims 1",
                node("Mul x W -> h"),
                node("ReduceSum h ax -> z"),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
        ),
    ),
    "ReduceMean": Op(
        (0,),
        _reduce_mean,
        cases=(
            case(
                "axis 1, keepdims 0",
                node("Mul x W -> h"),
                node("ReduceMean h ax -> z", keepdims=0),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
        ),
    ),
    "BatchNormalization": Op(
        (0, 1, 2),
        _batchnorm,
        _batchnorm_forward,
        cases=(
            case(
                "after a convolution",
                node("Conv x W -> h"),
                node("BatchNormalization h g b rm rv -> z", epsilon=1e-3),
                x=(2, 4, 4),
                low=0.5,
                W=(3, 2, 2, 2),
                g=(3,),
                b=(3,),
                rm=np.zeros(3),
                rv=np.ones(3),
            ),
        ),
    ),
    "Dropout": Op(
        (0,),
        _dropout,
        _dropout_forward,
        random=True,
        cases=(
            case(
                "ratio 0.5",
                node("Mul x W -> h"),
                node("Dropout h r -> z", seed=3),
                x=(6,),
                low=0.5,
                W=(6,),
                r=np.array(0.5),
            ),
        ),
    ),
    "Softmax": Op(
        (0,),
        _softmax,
        cases=(
            case(
                "inside a model",
                node("Mul x W -> h"),
                node("Softmax h -> s", axis=1),
                node("Mul s V -> z"),
                W=(4,),
                V=(4,),
            ),
        ),
    ),
    "LogSoftmax": Op(
        (0,),
        _log_softmax,
        cases=(
            case(
                "inside a model",
                node("Mul x W -> h"),
                node("LogSoftmax h -> s", axis=1),
                node("Mul s V -> z"),
                W=(4,),
                V=(4,),
            ),
        ),
    ),
    "Sum": Op(
        (),
        _sum,
        variadic=True,
        broadcast=(0,),  # every slot (variadic)
        cases=(
            case(
                "three, broadcast",
                node("Mul x W -> h"),
                node("Sum h V U -> z"),
                W=(4,),
                V=(1, 4),
                U=(4,),
            ),
        ),
    ),
    "Cast": Op((0,), _cast, cases=_unary("Cast", to=11)),  # to double: the cases' own type
    "CastLike": Op(
        (0,),
        _cast,
        cases=(case("like x", node("Mul x W -> h"), node("CastLike h x -> z"), W=(4,)),),
    ),
    "Neg": Op((0,), _neg, cases=_unary("Neg")),
    "Exp": Op((0,), _exp, cases=_unary("Exp")),
    "Log": Op(
        (0,),
        _log,
        cases=(
            case(
                "of a positive",
                node("Mul W W -> p"),
                node("Add p one -> q"),
                node("Mul x q -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Log j -> z"),
                W=(4,),
                one=np.array(1.0),
            ),
        ),
    ),
    "Sqrt": Op(
        (0,),
        _sqrt,
        cases=(
            case(
                "of a positive",
                node("Mul x W -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Sqrt j -> z"),
                W=(4,),
                one=np.array(1.0),
            ),
        ),
    ),
    "Reciprocal": Op(
        (0,),
        _reciprocal,
        cases=(
            case(
                "of a positive",
                node("Mul x W -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Reciprocal j -> z"),
                W=(4,),
                one=np.array(1.0),
            ),
        ),
    ),
    "Abs": Op((0,), _abs, cases=_unary("Abs")),
    # onnx's reference Erf rounds to float32 (and onnxruntime has no float64 Erf): a step of
    # 1e-3 keeps that rounding (1e-7) well under the tolerance, the truncation at 1e-6
    "Erf": Op(
        (0,),
        _erf,
        cases=(case("erf", node("Mul x W -> h"), node("Erf h -> z"), W=(4,), eps=1e-3, rtol=1e-3),),
    ),
    "Sin": Op((0,), _sin, cases=_unary("Sin")),
    "Cos": Op((0,), _cos, cases=_unary("Cos")),
    # the exponent is a constant of the model (x^3 in tanh-GELU, x^2 in a variance), never a
    # trained weight: a gradient flows to the base only
    "Pow": Op(
        (0,),
        _pow,
        cases=(
            case(
                "x^3, as tanh-GELU's",
                node("Mul x W -> h"),
                node("Pow h three -> z"),
                W=(4,),
                three=np.array(3.0),
            ),
            case(
                "x^0.5 of a positive",
                node("Mul x W -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Pow j half -> z"),
                W=(4,),
                one=np.array(1.0),
                half=np.array(0.5),
            ),
        ),
    ),
    "Max": Op(
        (0, 1),
        _max,
        broadcast=(0, 1),
        cases=(
            case("two, broadcast", node("Mul x W -> h"), node("Max h V -> z"), W=(4,), V=(1, 4)),
        ),
    ),
    "Min": Op(
        (0, 1),
        _min,
        broadcast=(0, 1),
        cases=(
            case("two, broadcast", node("Mul x W -> h"), node("Min h V -> z"), W=(4,), V=(1, 4)),
        ),
    ),
    "Where": Op(
        (1, 2),
        _where,
        broadcast=(1, 2),
        cases=(
            case(
                "on the batch's sign",
                node("Greater x zero -> c"),
                node("Mul x W -> h"),
                node("Where c h V -> z"),
                W=(4,),
                V=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Clip": Op(
        (0,),
        _clip,
        cases=(
            case(
                "as ReLU6",
                node("Mul x W -> h"),
                node("Clip h lo hi -> z"),
                low=-8.0,
                high=8.0,
                W=(4,),
                lo=np.array(0.0),
                hi=np.array(6.0),
            ),
            case("no bounds", node("Mul x W -> h"), node("Clip h -> z"), W=(4,)),
        ),
    ),
    "Expand": Op(
        (0,),
        _expand,
        broadcast=(0,),
        cases=(
            case(
                "a bias to the batch",
                node("Expand B shape -> b"),
                node("Mul x b -> z"),
                x=(2, 4),
                B=(1, 4),
                shape=np.array([2, 4], np.int64),
            ),
        ),
    ),
    "Slice": Op(
        (0,),
        _slice,
        cases=(
            case(
                "one axis, from the end",
                node("Mul x W -> h"),
                node("Slice h st en ax -> z"),
                x=(6,),
                W=(6,),
                st=np.array([1]),
                en=np.array([-1]),
                ax=np.array([1]),
            ),
            case(
                "two axes, to the end",
                node("Mul x W -> h"),
                node("Slice h st en ax -> z"),
                x=(3, 5),
                W=(3, 5),
                st=np.array([1, 2]),
                en=np.array([9, 2**62]),
                ax=np.array([1, 2]),
            ),
        ),
    ),
    "Pad": Op(
        (0,),
        _pad,
        cases=(
            case(
                "constant, both sides",
                node("Mul x W -> h"),
                node("Pad h p -> z"),
                x=(2, 3),
                W=(2, 3),
                p=np.array([0, 1, 0, 0, 2, 1]),
            ),
        ),
    ),
    "Split": Op(
        (0,),
        _split,
        cases=(
            case(
                "two pieces, both used",
                node("Mul x W -> h"),
                node("Split h sizes -> a b", axis=1),
                node("Mul a b -> z"),
                x=(4,),
                W=(4,),
                sizes=np.array([2, 2]),
            ),
            case(
                "one piece unused",
                node("Mul x W -> h"),
                node("Split h sizes -> a b", axis=1),
                node("Mul a a -> z"),
                x=(4,),
                W=(4,),
                sizes=np.array([2, 2]),
            ),
        ),
    ),
    "Gather": Op(
        (0,),
        _gather,
        cases=(
            case(
                "an embedding of repeated ids",
                node("Gather E ids -> e"),
                node("Mul x e -> z"),
                x=(5, 3),
                E=(4, 3),
                ids=np.array([0, 2, 2, 3, 0]),
            ),
        ),
    ),
    # no gradient flows through these (an integer or boolean output); listed so that a path
    # through them is known, not refused
    "Shape": Op(
        (),
        _none,
        cases=(
            case(
                "a trained tensor's, for a Reshape",
                node("Mul x W -> h"),
                node("Shape h -> s"),
                node("Reshape h s -> z"),
                W=(4,),
            ),
        ),
    ),
    "Size": Op(
        (),
        _none,
        cases=(
            case(
                "of a trained tensor",
                node("Mul x W -> h"),
                node("Size h -> n"),
                node("Cast n -> f", to=11),
                node("Mul h f -> z"),
                W=(4,),
            ),
        ),
    ),
    "Equal": Op(
        (),
        _none,
        cases=(
            case(
                "a mask from a trained tensor",
                node("Mul x W -> h"),
                node("Equal h h -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Greater": Op(
        (),
        _none,
        cases=(
            case(
                "ReLU by hand",
                node("Mul x W -> h"),
                node("Greater h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Less": Op(
        (),
        _none,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "GreaterOrEqual": Op(
        (),
        _none,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("GreaterOrEqual h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "LessOrEqual": Op(
        (),
        _none,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("LessOrEqual h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Not": Op(
        (),
        _none,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Not c -> d"),
                node("Where d h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "And": Op(
        (),
        _none,
        cases=(
            case(
                "two masks",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Less x zero -> d"),
                node("And c d -> b"),
                node("Where b h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Or": Op(
        (),
        _none,
        cases=(
            case(
                "two masks",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Less x zero -> d"),
                node("Or c d -> b"),
                node("Where b h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "ArgMax": Op(
        (),
        _none,
        cases=(
            case(
                "picks a row",
                node("Mul x W -> h"),
                node("ArgMax h -> i", axis=1, keepdims=0),
                node("Cast i -> f", to=11),
                node("Unsqueeze f ax -> u"),
                node("Mul h u -> z"),
                W=(4,),
                ax=_AX,
            ),
        ),
    ),
}


def diff_slots(node: NodeProto) -> tuple[int, ...]:
    """The input slots of node a gradient flows to (all of a variadic op's)."""
    return OPS[node.op_type].slots(node)


# ONNX's function ops that train through their bodies (compiler/expand.py), each with the
# graphs that check it as the rows' cases check theirs: no rule of their own, the primitives'
EXPANDED: dict[str, tuple[Case, ...]] = {
    "LayerNormalization": (
        case(
            "last axis, as nn.LayerNorm",
            node("Mul x W -> h"),
            # its statistics in float32 (stash_type), as an exported model's: float32's
            # rounding of the loss (1e-7) over a step of 2e-3 allows 1e-4 of error
            node("LayerNormalization h g b -> z", axis=-1, epsilon=1e-5),
            x=(3, 4),
            W=(3, 4),
            g=(4,),
            b=(4,),
            opset=20,
            eps=1e-3,
            rtol=1e-2,
            atol=1e-4,
        ),
    ),
    "Gelu": (
        case(
            "erf", node("Mul x W -> h"), node("Gelu h -> z"), W=(4,), opset=20, eps=1e-3, rtol=1e-3
        ),
        case(
            "tanh", node("Mul x W -> h"), node("Gelu h -> z", approximate="tanh"), W=(4,), opset=20
        ),
    ),
    "HardSwish": (
        case(
            "as MobileNetV3",
            node("Mul x W -> h"),
            node("HardSwish h -> z"),
            low=-4.0,
            high=4.0,
            W=(4,),
            opset=20,
        ),
    ),
    "HardSigmoid": (
        case(
            "defaults",
            node("Mul x W -> h"),
            node("HardSigmoid h -> z"),
            low=-4.0,
            high=4.0,
            W=(4,),
            opset=20,
        ),
    ),
    "Elu": (case("alpha 1", node("Mul x W -> h"), node("Elu h -> z"), W=(4,), opset=20),),
    "Selu": (case("defaults", node("Mul x W -> h"), node("Selu h -> z"), W=(4,), opset=20),),
    "Softplus": (
        case("softplus", node("Mul x W -> h"), node("Softplus h -> z"), W=(4,), opset=20),
    ),
    "PRelu": (
        case(
            "one slope a channel",
            node("Mul x W -> h"),
            node("PRelu h a -> z"),
            x=(2, 3),
            W=(2, 3),
            a=(2, 1),
            opset=20,
        ),
    ),
}
