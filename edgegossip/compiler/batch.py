"""A model exported with a fixed batch made to take any batch. torch.onnx.export without
dynamic_shapes (its default) writes the example's batch into the input's first axis and into
the shapes of the views it takes (a flatten is a Reshape to [1, 1152]); a device trains on
batches of 32. The input's first axis is made symbolic and each such view of a tensor computed
from the input is given -1 there; then the result is checked, in its inference form, to give
on a batch of two what the export gives on each example alone, or the model is refused in one
line saying how to export it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from edgegossip.compiler.errors import CompileError
from edgegossip.compiler.inference import for_inference


def any_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """model as it is when its input's batch is symbolic already; else a copy taking any
    batch, checked (CompileError in one line if it cannot be made so)."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        return model  # the compiler names that
    dims = inputs[0].type.tensor_type.shape.dim
    if not dims or not dims[0].HasField("dim_value"):
        return model
    fixed = dims[0].dim_value
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    x = next(i for i in copy.graph.input if i.name == inputs[0].name)
    x.type.tensor_type.shape.dim[0].dim_param = "batch"
    for o in copy.graph.output:
        if o.type.tensor_type.shape.dim:
            o.type.tensor_type.shape.dim[0].dim_param = "batch"
    del copy.graph.value_info[:]  # what the exporter inferred for its fixed batch
    _views_of_any_batch(copy.graph, x.name, fixed)
    _check(model, copy, x.name, fixed)
    return copy


def _views_of_any_batch(graph, x: str, fixed: int) -> None:
    """Each Reshape of a tensor computed from x to a constant shape that starts with the fixed
    batch: -1 there (0, copy the input's, where -1 is taken)."""
    from_x = {x}
    for n in graph.node:
        if set(n.input) & from_x:
            from_x.update(n.output)
    consts = small_constants(graph)
    for n in graph.node:
        if n.op_type != "Reshape" or n.input[0] not in from_x or n.input[1] not in consts:
            continue
        shape = consts[n.input[1]].astype(np.int64).copy()
        if shape.ndim != 1 or not len(shape) or shape[0] != fixed:
            continue
        shape[0] = 0 if -1 in shape else -1
        name = f"{n.input[1]}/any_batch/{n.output[0]}"
        graph.initializer.append(numpy_helper.from_array(shape, name))
        n.input[1] = name
    used = {i for n in graph.node for i in n.input}
    unused = [i for i in graph.initializer if i.name not in used and "/any_batch/" not in i.name]
    for i in unused:  # the fixed shapes replaced (a weight is always used)
        if i.data_type == onnx.TensorProto.INT64 and len(i.dims) == 1:
            graph.initializer.remove(i)


SHAPE_OPS = ("Constant", "Concat", "Unsqueeze", "Squeeze", "Cast", "Reshape", "Identity")


def small_constants(graph) -> dict[str, np.ndarray]:
    """The integer vectors the graph builds shapes from: initializers, Constant nodes and what
    the shape ops make of them alone (dynamo writes a view's shape as a Concat of Constants)."""
    from onnx.reference import ReferenceEvaluator

    out = {
        i.name: numpy_helper.to_array(i)
        for i in graph.initializer
        if i.data_type == onnx.TensorProto.INT64 and len(i.dims) <= 1
    }
    for n in graph.node:
        if n.op_type not in SHAPE_OPS or not all(i in out for i in n.input if i):
            continue
        node = onnx.helper.make_node(
            n.op_type,
            list(n.input),
            list(n.output),
            **{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute},
        )
        try:
            got = ReferenceEvaluator(node).run(None, {i: out[i] for i in n.input if i})
        except Exception:
            continue
        for name, v in zip(n.output, got):
            v = np.asarray(v)
            if v.dtype.kind == "i" and v.ndim <= 1 and v.size <= 16:
                out[name] = v
    return out


def _check(exported: onnx.ModelProto, made: onnx.ModelProto, x: str, fixed: int) -> None:
    """made, on a batch of two examples, gives what exported gives on each alone (both in
    inference form: a train-mode BatchNorm would mix the examples)."""
    import onnxruntime as ort

    how = (
        f"input {x!r} has a fixed batch of {fixed} (torch.onnx.export without dynamic_shapes) "
        "and the model cannot be made to take a device's batches of any size: export with "
        f"dynamic_shapes={{'{x}': {{0: torch.export.Dim('batch')}}}}"
    )
    runs = []
    for model in (exported, made):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for_inference(m.graph)
        opts = ort.SessionOptions()
        opts.log_severity_level = 4  # a model that fails here is refused in one line
        try:
            runs.append(
                ort.InferenceSession(
                    m.SerializeToString(), opts, providers=["CPUExecutionProvider"]
                )
            )
        except Exception:
            raise CompileError(how) from None
    info = runs[0].get_inputs()[0]
    kind = np.int64 if "int" in info.type else np.float32
    rng = np.random.default_rng(0)
    shape = [fixed, *[d if isinstance(d, int) else 1 for d in info.shape[1:]]]
    ones = [
        (rng.integers(0, 2, shape) if kind is np.int64 else rng.normal(size=shape)).astype(kind)
        for _ in range(2)
    ]
    try:
        alone = np.concatenate([runs[0].run(None, {x: one})[0] for one in ones])
        together = runs[1].run(None, {x: np.concatenate(ones)})[0]
    except Exception:
        raise CompileError(how) from None
    if alone.shape != together.shape or not np.allclose(alone, together, rtol=1e-4, atol=1e-5):
        raise CompileError(how)
