"""Tensor sequences made plain tensors again. torch's default exporter, unoptimised (as the docs'
export one-liner leaves it, to keep BatchNorm), writes `chunk` and `split` (an attention
block's `q, k, v = qkv.chunk(3, -1)`) as SplitToSequence, each part read by SequenceAt at a
constant position. That is a Split, whose rule the table has: each such pair becomes one Split
and an Identity per read. A sequence used any other way (a position computed at run time, a
ConcatFromSequence) is left as it is, for the op table to refuse naming the layer."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgegossip.compiler.batch import small_constants
from edgegossip.compiler.recurrent import shapes_of


def plain(model: onnx.ModelProto) -> onnx.ModelProto:
    """model with every SplitToSequence read only at constant positions made a Split (a copy
    where any is)."""
    splits = [n for n in model.graph.node if n.op_type == "SplitToSequence"]
    if not splits:
        return model
    consts = small_constants(model.graph)  # a split's sizes, a read's position
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    shapes = shapes_of(model)
    swap: dict[int, list[onnx.NodeProto]] = {}
    for n in splits:
        sizes = _sizes(n, consts, shapes)
        reads = readers.get(n.output[0], [])
        at = [_position(r, consts, len(sizes or [])) for r in reads]
        if sizes is None or n.output[0] in {o.name for o in model.graph.output}:
            continue
        if not reads or None in at or any(r.op_type != "SequenceAt" for r in reads):
            continue
        swap[id(n)] = _as_split(n, sizes)
        for r, k in zip(reads, at):
            swap[id(r)] = [helper.make_node("Identity", [f"{n.output[0]}.part{k}"], [r.output[0]])]
    if not swap:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = [m for n in model.graph.node for m in swap.get(id(n), [n])]
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _sizes(node: onnx.NodeProto, consts, shapes) -> list[int] | None:
    """The parts' lengths along the axis: a constant list as given; one constant length c
    as chunk does (parts of c, the last what is left); none: parts of one. None where the
    axis's length or the sizes are not known."""
    dims = shapes.get(node.input[0])
    axis = _attr(node, "axis", 0)
    length = dims[axis] if dims and -len(dims) <= axis < len(dims) else None
    given = consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if given is not None and given.ndim == 1:
        return [int(s) for s in given]
    if length is None or (given is not None and (given.ndim != 0 or int(given) < 1)):
        return None
    step = 1 if given is None else int(given)
    return [min(step, length - i) for i in range(0, length, step)]


def _position(read: onnx.NodeProto, consts, parts: int) -> int | None:
    """Which part a SequenceAt reads, counted from 0; None if not a constant within the parts."""
    if read.op_type != "SequenceAt" or len(read.input) < 2:
        return None
    k = consts.get(read.input[1])
    if k is None or k.size != 1 or not -parts <= int(k) < parts:
        return None
    return int(k) % parts


def _as_split(node: onnx.NodeProto, sizes: list[int]) -> list[onnx.NodeProto]:
    """The Split (and, without keepdims and split sizes, each part's Squeeze) making parts
    named SEQUENCE.partK."""
    seq, axis = node.output[0], _attr(node, "axis", 0)
    squeeze = _attr(node, "keepdims", 1) == 0 and (len(node.input) < 2 or not node.input[1])
    parts = [f"{seq}.part{k}" for k in range(len(sizes))]
    kept = [f"{p}.kept" for p in parts] if squeeze else parts
    made = [
        helper.make_node("Constant", [], [f"{seq}.sizes"], value=_int64(sizes)),
        helper.make_node("Split", [node.input[0], f"{seq}.sizes"], kept, node.name, axis=axis),
    ]
    if squeeze:
        made.append(helper.make_node("Constant", [], [f"{seq}.axis"], value=_int64([axis])))
        made += [helper.make_node("Squeeze", [k, f"{seq}.axis"], [p]) for k, p in zip(kept, parts)]
    for m in made:
        m.metadata_props.extend(node.metadata_props)  # refusals still name the user's layer
    return made


def _int64(values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, np.int64))
