"""Shape, layout and indexing ops, and reductions (rules of compiler/ops.py)."""

from __future__ import annotations

from typing import cast

import numpy as np
from onnx import NodeProto

from edgegossip.compiler.emit import Emit
from edgegossip.compiler.errors import CompileError
from edgegossip.compiler.table import attr, attrs_of, onnx_type


def reshape_back_vjp(e, n, g, s):
    """y = x with another shape (Reshape, Flatten, Squeeze, Unsqueeze):  gx = g in x's shape."""
    return [e.op("Reshape", g[0], e.op("Shape", n.input[0]))] + [None] * (len(n.input) - 1)


def transpose_vjp(e, n, g, s):
    """y = x permuted by p:  gx = g permuted by p's inverse."""
    perm = attr(n, "perm") or list(reversed(range(len(e.shape(n.input[0]) or []))))
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [e.op("Transpose", g[0], perm=inverse)]


def concat_vjp(e, n, g, s):
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
    rank = e.rank(n.input[0], what)
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


def reduce_sum_vjp(e, n, g, s):
    """y = sum_A x:  gx = g repeated over A."""
    axes = _reduce_axes(e, n, "ReduceSum's gradient")
    return [_spread(e, n, g[0], axes), None]


def reduce_mean_vjp(e, n, g, s):
    """y = mean_A x:  gx = g / |A| repeated over A."""
    what = "ReduceMean's gradient"
    axes = _reduce_axes(e, n, what)
    dims = e.shape(n.input[0]) or []
    if any(dims[a] is None for a in axes):
        raise CompileError(f"{what} needs the sizes of the axes {axes} of {n.input[0]!r}")
    count = float(np.prod([dims[a] for a in axes])) if axes else 1.0
    return [_spread(e, n, e.op("Div", g[0], e.const(count, like=n.output[0])), axes), None]


def reduce_max_vjp(e, n, g, s):
    """y = max_A x:  gx = g where x = y, shared evenly among equal maxima (as PyTorch's amax),
    0 elsewhere."""
    axes = _reduce_axes(e, n, "ReduceMax's gradient")
    y = n.output[0]
    if not attr(n, "keepdims", 1) and axes:
        y = e.op("Unsqueeze", y, e.const(axes))
    hit = e.op("Cast", e.op("Equal", n.input[0], y), to=onnx_type(e, n.input[0]))
    share = e.op("Div", hit, e.reduce_sum(hit, axes, keepdims=1)) if axes else hit
    return [e.op("Mul", _spread(e, n, g[0], axes), share), None]


def tile_vjp(e, n, g, s):
    """y = x repeated r_i times along each axis i:  gx = the sum of g over the repeats (g as
    [r_0, d_0, r_1, d_1, ..], summed over the r axes)."""
    dims = e.static(n.input[0], "Tile's gradient")
    reps = _constant_input(e, n, 1, "Tile's gradient") or []
    split = [v for r, d in zip(reps, dims) for v in (r, d)]
    g4 = e.op("Reshape", g[0], e.const(split))
    return [e.reduce_sum(g4, list(range(0, 2 * len(dims), 2)), keepdims=0), None]


def expand_vjp(e, n, g, s):
    """y = x broadcast to a shape:  gx = g, summed back to x's shape by the driver."""
    return [g[0], None]


def _constant_input(e: Emit, n: NodeProto, k: int, what: str) -> list[int] | None:
    if len(n.input) <= k or not n.input[k]:
        return None
    if n.input[k] not in e.values:
        raise CompileError(f"node {n.name or n.output[0]}: {what} needs constant inputs")
    return [int(v) for v in np.ravel(e.values[n.input[k]])]


def slice_vjp(e, n, g, s):
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
        if dims[a] < 0:  # the batch axis, its size the step's: only taken whole (x[:, -1])
            if lo == 0 and hi >= 2**31:
                continue
            raise CompileError(f"node {n.name or n.output[0]}: Slice of the batch axis")
        size = dims[a]
        lo = min(max(lo + size if lo < 0 else lo, 0), size)
        hi = min(max(hi + size if hi < 0 else hi, 0), size)
        pads[a], pads[rank + a] = lo, size - max(hi, lo)
    return [e.op("Pad", g[0], e.const(pads))] + [None] * (len(n.input) - 1)


def pad_vjp(e, n, g, s):
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


def split_vjp(e, n, g, s):
    """y_1 .. y_k = pieces of x along an axis:  gx = concat(g_1 .. g_k), a piece whose gradient
    is none counting as zeros."""
    axis = attr(n, "axis", 0)
    parts = [
        gi if gi is not None else e.op("Mul", y, e.const(0.0, like=y)) for gi, y in zip(g, n.output)
    ]
    return [e.op("Concat", *parts, axis=axis)] + [None] * (len(n.input) - 1)


def gather_vjp(e, n, g, s):
    """y = data[.., indices, ..] along an axis (an embedding's lookup on axis 0, a sequence's
    last step on axis 1):  gdata = zeros of data's shape with g added at each index
    (ScatterND, reduction add: an index used twice gets both), the axis moved to the front for
    it and back; a negative index counts from the end."""
    data, idx = n.input
    rank = len(e.shape(data) or e.static(data, "Gather's gradient"))
    axis = attr(n, "axis", 0) % rank
    q = np.ndim(e.values[idx]) if idx in e.values else len(e.shape(idx) or [None])
    size = e.op("Gather", e.op("Shape", data), e.const([axis]))
    idx = e.op("Where", e.op("Less", idx, e.const(0)), e.op("Add", idx, size), idx)
    to_front = [axis, *(i for i in range(rank) if i != axis)]
    front = e.op("Transpose", data, perm=to_front) if axis else data
    if axis and q:  # g [data's dims before the axis, idx's dims, after]: idx's to the front
        g0 = e.op(
            "Transpose",
            g[0],
            perm=[*range(axis, axis + q), *range(axis), *range(axis + q, rank + q - 1)],
        )
    else:
        g0 = g[0]
    zeros = e.op("Mul", front, e.const(0.0, like=data))
    flat = e.op("Reshape", idx, e.const([-1, 1]))
    rest = e.op("Slice", e.op("Shape", front), e.const([1]), e.const([np.iinfo(np.int64).max]))
    rows = e.op("Reshape", g0, e.op("Concat", e.const([-1]), rest, axis=0))
    added = e.op("ScatterND", zeros, flat, rows, reduction="add")
    back = [to_front.index(i) for i in range(rank)]
    return [e.op("Transpose", added, perm=back) if axis else added, None]


def resize_vjp(e, n, g, s):
    """y = x resized over its spatial axes (any mode, 1-D or 2-D: nearest, linear, cubic are
    each linear in x and separable, y = M_h x M_w^T with M [out, in] per axis):
    gx = M_h^T g M_w. Each M is computed here, once, by resizing the identity along that axis
    alone with the node's own attributes (onnx's reference Resize)."""
    where = f"node {n.name or n.output[0]}"
    a = attrs_of(n)
    if a.get("coordinate_transformation_mode") in (b"tf_crop_and_resize", "tf_crop_and_resize"):
        raise CompileError(f"{where}: Resize with tf_crop_and_resize")
    if "axes" in a or a.get("antialias"):
        raise CompileError(f"{where}: Resize with axes or antialias")
    xs = e.static(n.input[0], "Resize's gradient")
    ys = e.static(n.output[0], "Resize's gradient")
    nd = len(xs) - 2
    if nd not in (1, 2) or xs[1] != ys[1]:
        raise CompileError(f"{where}: Resize of other than 1 or 2 spatial axes")
    scales = e.values.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
    gx = g[0]
    for i in range(nd):
        axis = 2 + i
        scale = float(scales[axis]) if scales is not None and len(scales) else None
        m = _resize_matrix(a, xs[axis], ys[axis], scale, n.input[0])
        if m.shape[0] == m.shape[1] and np.array_equal(m, np.eye(len(m))):
            continue
        if i == nd - 1:  # the last axis: g [.., out] M [out, in]
            gx = e.op("MatMul", gx, e.const(m))
        else:  # the one before it: M^T [in, out] g [.., out, w]
            gx = e.op("MatMul", e.const(m.T), gx)
    return [gx] + [None] * (len(n.input) - 1)


def _resize_matrix(a: dict, n_in: int, n_out: int, scale: float | None, name: str) -> np.ndarray:
    """[n_out, n_in]: Resize with attributes a along one axis, of the identity."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    basis = np.eye(n_in).reshape(n_in, 1, n_in)
    inputs = ["x", "", "scales"] if scale is not None else ["x", "", "", "sizes"]
    consts = (
        {"scales": np.array([1.0, 1.0, scale], np.float32)}
        if scale is not None
        else {"sizes": np.array([n_in, 1, n_out], np.int64)}
    )
    node = helper.make_node("Resize", inputs, ["y"], **a)
    graph = helper.make_graph(
        [node],
        "basis",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(basis.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    out = np.asarray(cast(list, ReferenceEvaluator(model).run(None, {"x": basis}))[0])
    if out.shape != (n_in, 1, n_out):
        raise CompileError(f"Resize of {name!r}: cannot tell its interpolation along an axis")
    return np.ascontiguousarray(out[:, 0, :].T)


def none_vjp(e, n, g, s):
    """No gradient: the output is an integer or a boolean (a shape, a comparison, an index)."""
    return [None] * len(n.input)
