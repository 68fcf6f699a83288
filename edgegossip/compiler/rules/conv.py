"""Convolution and pooling (rules of compiler/ops.py)."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, helper

from edgegossip.compiler.emit import Emit
from edgegossip.compiler.errors import CompileError
from edgegossip.compiler.table import Grads, attr, attrs_of, copy_node, onnx_type


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


def conv_vjp(e, n, g, s):
    """y = conv(x, W) + b, stride s, pads p, dilation d, groups G (1-D and 2-D):
    gx = conv_transpose(g, W) with the same s, p, d, G (and the output padding that gives back
    x's size); gW = conv(x', g') with stride d and dilation s, cut to W's kernel size, where x'
    holds x's batch as channels and its channels within a group as batch, and g' g's batch as
    channels (_weight_grad); gb = sum over batch and space of g. Each is one op whatever the
    groups (a depthwise convolution's gradient was once one op per channel)."""
    x, w = n.input[0], n.input[1]
    xs, ys, nd, strides, pads, dil = _conv_geometry(e, n, "Conv's gradient")
    ws = e.static(w, "Conv's gradient")
    groups = attr(n, "group", 1)
    kernel = ws[2:]
    extra = _output_padding(xs, ys, nd, strides, pads, dil, kernel)
    geo = {"strides": strides, "pads": pads, "dilations": dil, "output_padding": extra}
    gx = e.op("ConvTranspose", g[0], w, group=groups, **geo)
    gw = _weight_grad(e, x, xs, g[0], ys, groups, strides, pads, dil, kernel)
    out: Grads = [gx, gw]
    if len(n.input) > 2 and n.input[2]:
        out.append(e.reduce_sum(g[0], [0] + list(range(2, 2 + nd)), keepdims=0))
    return out


def _weight_grad(e: Emit, inp, in_dims, g, out_dims, groups, strides, pads, dil, kernel) -> str:
    """d <g, conv(inp, W)> / dW, W [out_ch, in_ch / G, *kernel], as one convolution of G groups:
    x' [in_ch / G, G N, *space] (x' [i, k N + n] = inp [n, k in_ch / G + i]) by
    g' [out_ch, N, *space'] (g' [o, n] = g [n, o]), stride and dilation swapped, gives
    [in_ch / G, out_ch, ...]: each output channel o of group k sums over the batch its
    correlation with its own group's input channels; cut to the kernel and transposed."""
    nd = len(kernel)
    out_ch = out_dims[1]
    if groups > 1 and groups == in_dims[1] == out_ch:
        return _depthwise_weight_grad(e, inp, g, out_dims, strides, pads, dil, kernel)
    if groups == 1:
        return _windowed_weight_grad(e, inp, in_dims[1], g, out_dims, strides, pads, dil, kernel)
    space = list(range(3, 3 + nd))
    per, sizes = in_dims[1] // groups, list(in_dims[2:])
    # [N, C, *s] -> [N, G, C/G, *s] -> [C/G, G, N, *s] -> [C/G, G N, *s]
    xg = e.op("Reshape", inp, e.const([0, groups, per] + sizes))
    xg = e.op("Transpose", xg, perm=[2, 1, 0] + space)
    xg = e.op("Reshape", xg, e.const([per, -1] + sizes))
    gg = e.op("Transpose", g, perm=[1, 0] + list(range(2, 2 + nd)))  # [out_ch, N, *s']
    full = e.op("Conv", xg, gg, group=groups, strides=dil, dilations=strides, pads=pads)
    cut = e.op("Slice", full, e.const([0] * nd), e.const(kernel), e.const(list(range(2, 2 + nd))))
    return e.op("Transpose", cut, perm=[1, 0] + list(range(2, 2 + nd)))


def _windows(e: Emit, xp: str, axes: list[int], out_space, strides, dil, kernel) -> list[str]:
    """For each kernel offset (row-major), the padded input's window that meets the output's
    positions there: a strided slice of xp along `axes` (its spatial axes)."""
    windows = []
    for offset in np.ndindex(*kernel):
        starts = [o * d for o, d in zip(offset, dil)]
        ends = [st + s * (o - 1) + 1 for st, s, o in zip(starts, strides, out_space)]
        step = list(strides)
        windows.append(
            e.op("Slice", xp, e.const(starts), e.const(ends), e.const(axes), e.const(step))
        )
    return windows


def _windowed_weight_grad(e: Emit, x, in_ch, g, out, strides, pads, dil, kernel) -> str:
    """An ungrouped convolution's gW [C_out, C_in, *k]: channels last, each kernel offset's
    window of the padded input (a strided slice, [N * space', C_in]) multiplied by g as
    [C_out, N * space'], one matrix product per offset. As a convolution of the batch
    (_weight_grad's general form) onnxruntime spends most of a step here: for ResNet-8's
    16 -> 16 channels at 8x8, batch 128, 5.5 ms against 1.1 ms this way; a 1x1 convolution's,
    1.4-1.9 ms against 0.24-0.30."""
    nd = len(kernel)
    axes = list(range(1, 1 + nd))
    xh = _channels_last_padded(e, x, pads)  # [N, *padded space, C_in]
    gh = e.op("Transpose", g, perm=[1, 0, *range(2, 2 + nd)])
    gh = e.op("Reshape", gh, e.const([out[1], -1]))  # [C_out, N * space']
    parts = [
        e.op("MatMul", gh, e.op("Reshape", window, e.const([-1, in_ch])))
        for window in _windows(e, xh, axes, out[2:], strides, dil, kernel)
    ]
    stacked = parts[0] if len(parts) == 1 else e.op("Concat", *parts, axis=0)
    stacked = e.op("Reshape", stacked, e.const([*kernel, out[1], in_ch]))
    return e.op("Transpose", stacked, perm=[nd, nd + 1, *range(nd)])


def _channels_last_padded(e: Emit, x: str, pads: list[int]) -> str:
    """x [N, C, *space] as [N, *space, C], zero-padded by pads (ONNX's begins, then ends).
    Transposed first: onnxruntime's Pad copies row by row, and channels first a small feature
    map's rows are a few floats (a [128, 64, 4, 4] padded by one: 0.64 ms; the same channels
    last 0.04 ms)."""
    nd = len(pads) // 2
    xh = e.op("Transpose", x, perm=[0, *range(2, 2 + nd), 1])
    if not any(pads):
        return xh
    return e.op("Pad", xh, e.const([0, *pads[:nd], 0, 0, *pads[nd:], 0]))


def _depthwise_weight_grad(e: Emit, x, g, out, strides, pads, dil, kernel) -> str:
    """A depthwise convolution's gW [C, 1, *k] (g [N, C, *out]): for each kernel offset, the
    padded input's window at that offset (a strided slice) times g, summed over batch and
    space, channels last so that a window's rows are C floats long, not a few. As a grouped
    convolution of the batch (as _weight_grad does the rest) onnxruntime took 5.4 ms for
    [128, 32, 8, 8] at 3x3; channels first this way 3.2 ms, channels last 1.5 ms."""
    nd = len(kernel)
    xp = _channels_last_padded(e, x, pads)
    gh = e.op("Transpose", g, perm=[0, *range(2, 2 + nd), 1])
    axes = list(range(1, 1 + nd))
    # space first, then the batch: one ReduceSum of the batch and space together, keeping the
    # last axis, took onnxruntime 0.81 ms for [128, 10, 5, 16] on two threads (0.036 on one);
    # these two 0.027
    sums = [
        e.reduce_sum(e.reduce_sum(e.op("Mul", window, gh), axes, keepdims=0), [0], keepdims=0)
        for window in _windows(e, xp, axes, out[2:], strides, dil, kernel)
    ]
    stacked = e.op("Reshape", e.op("Concat", *sums, axis=0), e.const([*kernel, out[1]]))
    per_channel = e.op("Transpose", stacked, perm=[nd, *range(nd)])
    return e.op("Unsqueeze", per_channel, e.const([1]))


def conv_transpose_vjp(e, n, g, s):
    """y = conv_transpose(x, W) + b (W [C_in, C_out, *k]), stride s, pads p, dilation d: the
    adjoint of conv(., W) with the same s, p, d, which maps y's space back to x's. So
    gx = conv(g, W) with those; gW = the weight gradient of that conv with g as its input and
    x as its output's gradient (as Conv's rule computes it); gb = sum over batch and space of
    g. Groups are refused: no float64 runtime here runs a grouped ConvTranspose to check
    them."""
    where = f"node {n.name or n.output[0]}"
    if attr(n, "output_shape") is not None:
        raise CompileError(f"{where}: ConvTranspose with output_shape")
    if attr(n, "group", 1) != 1:
        raise CompileError(f"{where}: ConvTranspose with groups")
    x, w = n.input[0], n.input[1]
    xs, ys, nd, strides, pads, dil = _conv_geometry(e, n, "ConvTranspose's gradient")
    kernel = e.static(w, "ConvTranspose's gradient")[2:]
    gx = e.op("Conv", g[0], w, strides=strides, pads=pads, dilations=dil)
    gw = _weight_grad(e, g[0], ys, x, xs, 1, strides, pads, dil, kernel)
    out: Grads = [gx, gw]
    if len(n.input) > 2 and n.input[2]:
        out.append(e.reduce_sum(g[0], [0] + list(range(2, 2 + nd)), keepdims=0))
    return out


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


def maxpool_forward(e: Emit, node: NodeProto) -> dict:
    """Tiling windows: MaxPool as it is (its gradient compares x with y). Otherwise MaxPool also
    gives the flat indices of its maxima, which its gradient scatters to (several times slower
    in onnxruntime than MaxPool alone)."""
    if _tiles(e, node):
        return copy_node(e, node)
    idx = node.output[1] if len(node.output) > 1 and node.output[1] else e.fresh("argmax")
    e.nodes.append(
        helper.make_node(
            "MaxPool", list(node.input), [node.output[0], idx], name=node.name, **attrs_of(node)
        )
    )
    return {"indices": idx}


def maxpool_vjp(e, n, g, s):
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

    cast = onnx_type(e)
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


def avgpool_vjp(e, n, g, s):
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


def global_avgpool_vjp(e, n, g, s):
    """y = mean of x over all space:  gx = g / |space|, repeated over space."""
    x = n.input[0]
    xs = e.static(x, "GlobalAveragePool's gradient")
    size = 1
    for d in xs[2:]:
        size *= d
    return [e.op("Expand", e.op("Div", g[0], e.const(float(size))), e.op("Shape", x))]
