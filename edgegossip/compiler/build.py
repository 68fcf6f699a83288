"""From an inference ONNX model to one training graph of standard ONNX ops.

The training graph's inputs are the flat parameter vector `params` [P], a batch `x` in the
model's input shape, and `y`: class indices [batch] (int64) for cross-entropy, targets in the
output's shape for mse. Its outputs are `loss` (a scalar), `grad` [P] (d loss / d params, laid
out as params), `logits` (the model's output before a final Softmax or LogSoftmax) and, for
each BatchNormalization, the batch's mean and variance (`state/NAME/mean`, `state/NAME/var`),
from which the trainer keeps the running averages.

How: the model is compiled at its own opset (one older than OPSET is first converted up to it
by onnx's own version converter; RUNTIMES lists the opsets taken), and every rule emits forms
valid from OPSET on. Every float initializer that reaches the output through a differentiable
input is a parameter: it becomes a slice of `params`, reshaped. The forward nodes run as they
are, but for the ops whose training differs (ops.py: BatchNormalization on batch statistics,
Dropout drawing its mask, MaxPool giving its argmax). Then reverse-mode differentiation walks the
nodes backward from the loss, each op's rule (ops.OPS) adding the nodes of its vector-Jacobian
product, and a tensor's gradient is the Sum of what every consumer gave it.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgegossip import artifact
from edgegossip.compiler import prefix
from edgegossip.compiler.batch import any_batch
from edgegossip.compiler.coverage import exporter_changes, refuse_untrained, untrained
from edgegossip.compiler.emit import Emit
from edgegossip.compiler.errors import CompileError, where
from edgegossip.compiler.expand import expand
from edgegossip.compiler.ops import OPS, copy_node, diff_slots
from edgegossip.compiler.recurrent import unroll
from edgegossip.compiler.sequences import plain

# The opsets a training graph is made at, each with the oldest onnxruntime that runs it and the
# IR version that runtime reads (onnxruntime's docs/compatibility table). A model is compiled at
# its own opset; one older than the floor is converted up to it (the rules emit opset 18's forms:
# ReduceMean's axes as an input), one newer than the table is refused.
RUNTIMES = {18: ("1.14", 8), 19: ("1.15", 8), 20: ("1.17", 9), 21: ("1.18", 10)}
OPSET = min(RUNTIMES)  # the floor
# what the compiler holds of a model: a device model's tensors are far smaller. Bounds on the
# work a model file can cause, refused in one line beyond them
MAX_TENSOR_ELEMENTS = 1 << 28  # one initializer or Constant (1 GB of float32, the file bound)
MAX_FOLD_ELEMENTS = 1 << 24  # one tensor computed from constants at compile time (64 MB)
MAX_FOLD_TOTAL = 1 << 26  # all of them together (256 MB of float32)
_COMPLEX = (TensorProto.COMPLEX64, TensorProto.COMPLEX128)
LOSSES = artifact.LOSSES  # what a manifest may name
_FINAL = ("Softmax", "LogSoftmax")
FOLD_ROUNDS = 3  # shape inference and folding in turn; torch's RNN exports need one more
_RANDOM = (
    "Dropout",
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
)  # a classifier's last op, folded into cross-entropy


@dataclass(frozen=True)
class Param:
    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Prefix:
    """A frozen prefix computed once per example (prefix.py finds the cut)."""

    features: onnx.ModelProto  # x -> the cut tensor, every BatchNorm on its statistics
    train: Compiled  # the cut, y -> loss, grad; the same parameter layout
    name: str  # the cut tensor
    shape: list[int]  # one example's


@dataclass(frozen=True)
class Compiled:
    train: onnx.ModelProto  # the training graph
    params: list[Param]  # the layout of `params` and `grad`
    initial: np.ndarray  # the model's own initial parameters, flat
    input_name: str
    input_shape: list[int | None]  # without the batch axis
    output_shape: list[int | None]  # the logits', without the batch axis
    state: list[tuple[str, str, tuple[int, ...]]]  # (BatchNorm node, running-stat init, shape)
    ops: list[str]
    opset: int  # the training graph's (the model's own, or the floor)
    untrained: list[str]  # weights left as exported (accepted by the user)
    frozen: list[str]  # weights the user froze (Choice)
    input_dtype: str = "float32"  # the batch's element type: int64 for token ids
    exporter_changes: list[str] = field(default_factory=list)  # coverage.exporter_changes
    prefix: Prefix | None = None  # a frozen prefix computed once per example


@dataclass(frozen=True)
class Choice:
    """What the user chose to train: weights matching a `freeze` glob stay as exported, and
    with `train` globs only the weights matching one train (fnmatch, against the names the
    exporter gave: the module path, `backbone.0.weight`)."""

    freeze: tuple[str, ...] = ()
    train: tuple[str, ...] = ()
    accept_untrained: bool = False

    def frozen(self, names: list[str]) -> set[str]:
        for glob in (*self.freeze, *self.train):
            if not any(fnmatch.fnmatchcase(n, glob) for n in names):
                raise CompileError(f"{glob!r} matches no weight of the model ({names[0]}, ...)")
        out = {n for n in names if any(fnmatch.fnmatchcase(n, g) for g in self.freeze)}
        if self.train:
            out |= {n for n in names if not any(fnmatch.fnmatchcase(n, g) for g in self.train)}
        if out == set(names):
            raise CompileError("every weight is frozen: nothing would train")
        return out


def compile_model(
    model: onnx.ModelProto, loss: str, choice: Choice = Choice(), with_prefix: bool = True
) -> Compiled:
    """The training graph for `model` under `loss` (LOSSES), training what `choice` leaves;
    CompileError in one line for what cannot be compiled, and for a weight it would leave
    untrained unless the choice accepts that (coverage.py). A frozen weight is a constant of
    the graph; a BatchNormalization whose scale and bias are both frozen runs as in inference
    (its running statistics, as PyTorch's eval()), and is no state; no gradient is computed
    for what lies before the earliest trained weight."""
    if loss not in LOSSES:
        raise CompileError(f"loss {loss!r}: choose {' or '.join(LOSSES)}")
    _check_tensors(model.graph)
    _check_domains(model.graph)
    model = any_batch(_at_opset(model))  # torch.onnx.export's default fixes the batch
    model = _clear_of_step_names(untied(unroll(plain(expand(model, set(OPS), opset_of(model))))))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    x_info, dtype = _data_input(graph, inits)
    producer = {o: n for n in graph.node for o in n.output}
    logits = _logits(graph, producer, loss)
    found = _params(graph, inits, logits, producer)
    frozen = choice.frozen([p.name for p in found]) if found else set()
    params = _laid_out([p for p in found if p.name not in frozen])
    live = ancestors(logits, producer)
    shapes, types, values = _constants(model, dtype, live)
    e = Emit(dtype, shapes, values, types)
    _slice_params(e, params)
    saved = _forward(e, graph, logits, producer, frozen)
    g_logits = _loss(e, logits, loss)
    _flat_grad(e, params, _backward(e, graph, logits, g_logits, saved, params))
    state = _state(e, graph, saved, inits)
    left = untrained(graph, params, state, live, frozen)
    if not choice.accept_untrained:
        refuse_untrained(left)
    arrays = [numpy_helper.to_array(inits[p.name]).astype(dtype).ravel() for p in params]
    return Compiled(
        train=_model(e, graph, x_info, logits, loss, params, state, model.opset_import),
        params=params,
        initial=np.concatenate(arrays) if arrays else np.zeros(0, dtype),
        input_name=x_info.name,
        input_dtype=str(helper.tensor_dtype_to_np_dtype(x_info.type.tensor_type.elem_type)),
        input_shape=shapes.get(x_info.name, [None])[1:],
        output_shape=(shapes.get(logits) or [None])[1:],
        state=state,
        ops=sorted({n.op_type for n in graph.node}),
        opset=opset_of(model),
        untrained=[name for name, _, _ in left],
        frozen=sorted(frozen),
        exporter_changes=exporter_changes(graph, params),
        prefix=_prefix(model, x_info.name, logits, params, live, loss, choice)
        if frozen and with_prefix
        else None,
    )


def _prefix(model, x: str, logits: str, params, live, loss: str, choice: Choice):
    """The frozen prefix a device may compute once per example, and the graph that trains on
    its output with the same parameters (compiler/prefix.py); None where there is none."""
    name = prefix.cut(model.graph, x, {p.name for p in params}, live)
    if name is None:
        return None
    head, tail = prefix.split(model, x, name, logits)
    shape = prefix.shape_of(head, name)
    if shape is None:
        return None
    keep = Choice(train=tuple(p.name for p in params), accept_untrained=choice.accept_untrained)
    train = compile_model(tail, loss, keep, with_prefix=False)
    if [(p.name, p.shape) for p in train.params] != [(p.name, p.shape) for p in params]:
        return None
    version = next(o.version for o in head.opset_import if o.domain in ("", "ai.onnx"))
    head.ir_version = RUNTIMES[version][1]
    return Prefix(head, train, name, shape)


INDEX_INPUTS = (np.dtype(np.int64), np.dtype(np.int32))  # an embedding's token ids
STEP_NAMES = ("params", "y", "loss", "grad")  # the training graph's own inputs and outputs


def _clear_of_step_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """model with a tensor its nodes compute under one of STEP_NAMES renamed (an exporter may
    name a value `y`); an input or a weight so named is refused."""
    g = model.graph
    for v in (*g.input, *g.initializer):
        if v.name in STEP_NAMES:
            raise CompileError(
                f"the model's {v.name!r} is a name the training step uses: rename it"
            )
    taken = {o for n in g.node for o in n.output} & set(STEP_NAMES)
    if not taken:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    new = {name: f"{name}.model" for name in taken}
    for n in copy.graph.node:
        n.input[:] = [new.get(i, i) for i in n.input]
        n.output[:] = [new.get(o, o) for o in n.output]
    for o in copy.graph.output:
        o.name = new.get(o.name, o.name)
    return copy


def _data_input(graph, inits) -> tuple[onnx.ValueInfoProto, np.dtype]:
    """The model's one input that is not an initializer (the batch), and its float type; every
    node of the standard domain."""
    data_inputs = [i for i in graph.input if i.name not in inits]
    if len(data_inputs) != 1:
        names = [i.name for i in data_inputs]
        raise CompileError(f"the model needs one input (a batch), it has {len(names)}: {names}")
    x_info = data_inputs[0]
    dtype = helper.tensor_dtype_to_np_dtype(x_info.type.tensor_type.elem_type)
    if dtype in INDEX_INPUTS:  # token ids: the model computes in its weights' float type
        weights = [numpy_helper.to_array(i).dtype for i in graph.initializer]
        return x_info, next((w for w in weights if w.kind == "f"), np.dtype(np.float32))
    if dtype.kind != "f":
        raise CompileError(f"input {x_info.name!r} is {dtype}, not a float or an index tensor")
    return x_info, dtype


def _nodes(graph):
    """Every node of graph and of the graphs its nodes hold (If's branches, Loop's and Scan's
    bodies), at any depth."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                yield from _nodes(sub)


def _check_domains(graph) -> None:
    """Every node, a subgraph's included, is standard ONNX: stock onnxruntime on the devices
    runs nothing else."""
    for node in _nodes(graph):
        if node.domain not in ("", "ai.onnx"):
            where = node.name or node.output[0]
            raise CompileError(
                f"node {where}: op {node.domain}.{node.op_type} is not standard ONNX"
            )


def _check_tensors(graph) -> None:
    """Every tensor the model holds (initializers, Constant values, in subgraphs too) has the
    data its dimensions declare, within MAX_TENSOR_ELEMENTS: what a file says it holds is read
    only once it is seen to hold it."""
    tensors = list(graph.initializer) + list(graph.sparse_initializer)
    for node in _nodes(graph):
        tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
    for t in tensors:
        dims = t.values.dims if isinstance(t, onnx.SparseTensorProto) else t.dims
        count = math.prod(max(0, d) for d in dims)
        name = t.values.name if isinstance(t, onnx.SparseTensorProto) else t.name
        if count > MAX_TENSOR_ELEMENTS or min(dims, default=0) < 0:
            raise CompileError(
                f"tensor {name!r} declares {list(dims)}: {count} elements, more than a device "
                f"model holds ({MAX_TENSOR_ELEMENTS})"
            )
        if isinstance(t, onnx.TensorProto) and _held(t) != count:
            raise CompileError(f"tensor {name!r} declares {count} elements and holds {_held(t)}")


def _held(t: onnx.TensorProto) -> int:
    """How many elements t's data holds (as stored inline: onnx.load brought in external data)."""
    if t.HasField("raw_data"):
        size = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        return len(t.raw_data) // size if len(t.raw_data) % size == 0 else -1
    field = helper.tensor_dtype_to_field(t.data_type)
    held = len(getattr(t, field))
    return held // 2 if t.data_type in _COMPLEX else held


def _logits(graph, producer, loss: str) -> str:
    """What the loss is computed on: the first output, or for cross-entropy what a final
    Softmax or LogSoftmax takes."""
    out = graph.output[0].name
    final = producer.get(out)
    if final is not None and final.op_type in _FINAL and loss == "cross-entropy":
        return final.input[0]
    return out


def opset_of(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _at_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model at its own opset, or converted up to the floor (RUNTIMES)."""
    version = opset_of(model)
    if version < 13:
        raise CompileError(f"opset {version}: export with opset 13 or later")
    if version > max(RUNTIMES):
        raise CompileError(
            f"opset {version}: the compiler takes opsets up to {max(RUNTIMES)}; export with "
            f"torch.onnx.export(..., opset_version={max(RUNTIMES)})"
        )
    if version >= OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, OPSET)
    except Exception as e:  # the converter raises its own RuntimeErrors and more
        raise CompileError(
            f"cannot convert the model from opset {version} up to {OPSET}: "
            f"{str(e).splitlines()[0]}; export with opset_version={OPSET} or later"
        ) from None


def _shapes(model: onnx.ModelProto, dtype) -> tuple[dict[str, list[int | None]], dict]:
    """(each tensor's dims, the float tensors whose type is not `dtype`: their types)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:
        raise CompileError(f"shape inference failed: {str(e).splitlines()[0]}") from None
    out: dict[str, list[int | None]] = {}
    types: dict[str, np.dtype] = {}
    infos = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    for vi in infos:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if t.elem_type:
            np_type = helper.tensor_dtype_to_np_dtype(t.elem_type)
            if np_type.kind == "f" and np_type != dtype:
                types[vi.name] = np_type
    for init in inferred.graph.initializer:
        out[init.name] = list(init.dims)
    return out, types


def _constants(model: onnx.ModelProto, dtype, live: set[str]):
    """(shapes, types, constant values), each knowing more with the other: a Shape node whose
    dims are known is a constant, and what that constant sizes (dynamo slices an RNN's weights
    by a hidden size it reads with Shape) is then known to shape inference; in rounds until
    nothing new is found."""
    shapes, types = _shapes(model, dtype)
    values = _values(model.graph, model.opset_import, shapes, live)
    for _ in range(FOLD_ROUNDS):
        shapes, types = _shapes(_folded(model, values), dtype)
        more = _values(model.graph, model.opset_import, shapes, live)
        if more.keys() == values.keys():
            break
        values = more
    return shapes, types, values


def _folded(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """model with every node whose outputs are all known replaced by those constants."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    g = copy.graph
    known = {o for n in g.node if all(o in values for o in n.output if o) for o in n.output if o}
    kept = [n for n in g.node if not all(o in values for o in n.output if o)]
    have = {i.name for i in g.initializer}
    g.initializer.extend(
        numpy_helper.from_array(np.asarray(values[k]), k) for k in sorted(known - have)
    )
    del g.node[:]
    g.node.extend(kept)
    return copy


def _values(graph, opsets, shapes, live: set[str]) -> dict[str, np.ndarray]:
    """What the model holds as constants: its initializers, and every node on the way to the
    output computed from constants alone (exporters build axes and shapes out of Constant
    nodes), evaluated here by onnx's reference evaluator, one node at a time. A node is folded
    only where shape inference knows its outputs' sizes: each within MAX_FOLD_ELEMENTS and
    all of them within MAX_FOLD_TOTAL, or the model is refused; the work a model file can
    cause here is bounded by that, not by its bytes."""
    from onnx.reference import ReferenceEvaluator

    out = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    partial: dict[str, list[int | None]] = {}  # Shape outputs with some dims unknown (the batch)
    total = 0
    for node in graph.node:
        if not set(node.output) & live:
            continue  # nothing the model computes needs it
        if node.op_type == "Shape":
            dims = _read_dims(node, shapes)
            if dims is not None and None not in dims:
                out[node.output[0]] = np.array(dims, np.int64)  # the dims it reads are known
            elif dims is not None:
                partial[node.output[0]] = dims
            continue
        if (picked := _known_dims(node, partial, out)) is not None:
            out[node.output[0]] = picked  # a known dim picked out of a partly known shape
            continue
        if node.op_type in _RANDOM or not all(i in out for i in node.input if i):
            continue
        sizes = [_elements(shapes.get(o)) for o in node.output if o]
        known = [n for n in sizes if n is not None]
        if len(known) < len(sizes):
            continue  # its size is not known before it is computed: it stays a node
        total += sum(known)
        if max(known, default=0) > MAX_FOLD_ELEMENTS or total > MAX_FOLD_TOTAL:
            raise CompileError(
                f"node {node.name or node.output[0]}: folding its constant output "
                f"{shapes.get(node.output[0])} would take {total} elements of constants, more "
                f"than {MAX_FOLD_TOTAL} (or {MAX_FOLD_ELEMENTS} for one tensor)"
            )
        inputs = [
            helper.make_tensor_value_info(
                i, helper.np_dtype_to_tensor_dtype(out[i].dtype), out[i].shape
            )
            for i in node.input
            if i
        ]
        outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o]
        single = helper.make_model(
            helper.make_graph([node], "fold", inputs, outputs), opset_imports=list(opsets)
        )
        try:
            got = ReferenceEvaluator(single).run(None, {i: out[i] for i in node.input if i})
        except Exception:  # not foldable here: it stays a node of the graph
            continue
        out.update({o: np.asarray(v) for o, v in zip(node.output, got) if o})
    return out


def _read_dims(node: onnx.NodeProto, shapes) -> list[int | None] | None:
    """The dims a Shape node reads (its start to its end), None for each not known: an
    exporter's way to size a weight's slice from a layer's hidden size, or (TorchScript's
    `chunk`) a slice of the features from their count."""
    dims = shapes.get(node.input[0])
    if dims is None:
        return None
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    return [None if d is None else int(d) for d in dims[slice(a.get("start", 0), a.get("end"))]]


def _known_dims(node: onnx.NodeProto, partial, values) -> np.ndarray | None:
    """What a Gather at constant positions from a partly known shape reads, where every dim it
    reads is known; None otherwise."""
    if node.op_type != "Gather" or node.input[0] not in partial or node.input[1] not in values:
        return None
    if any(a.name == "axis" and a.i != 0 for a in node.attribute):
        return None
    dims, at = partial[node.input[0]], values[node.input[1]]
    if at.dtype.kind not in "iu" or not all(-len(dims) <= int(k) < len(dims) for k in at.flat):
        return None
    picked = np.array([dims[int(k)] for k in at.flat], dtype=object).reshape(at.shape)
    return None if any(d is None for d in picked.flat) else picked.astype(np.int64)


def _elements(shape: list[int | None] | None) -> int | None:
    if shape is None:
        return None
    dims = [d for d in shape if d is not None and d >= 0]
    return math.prod(dims) if len(dims) == len(shape) else None


def _params(graph, inits, logits: str, producer) -> list[Param]:
    """Float initializers that reach `logits` through differentiable inputs, in graph order."""
    reach = ancestors(logits, producer)
    found: list[str] = []
    for node in graph.node:
        if node.output[0] not in reach and not (set(node.output) & reach):
            continue
        if node.op_type not in OPS:
            continue
        for slot in diff_slots(node):
            if slot < len(node.input):
                name = node.input[slot]
                init = inits.get(name)
                if (
                    init is not None
                    and init.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE)
                    and name not in found
                ):
                    found.append(name)
    return _laid_out([Param(name, tuple(inits[name].dims), 0) for name in found])


def _laid_out(params: list[Param]) -> list[Param]:
    """The parameters one after another in the flat vector, in this order."""
    out, offset = [], 0
    for p in params:
        out.append(Param(p.name, p.shape, offset))
        offset += p.size
    return out


def ancestors(name: str, producer) -> set[str]:
    """Every tensor `name` is computed from, itself included."""
    seen, todo = set(), [name]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        node = producer.get(t)
        if node is not None:
            todo.extend(i for i in node.input if i)
    return seen


def _slice_params(e: Emit, params: list[Param]) -> None:
    axes = e.const([0])
    for p in params:
        part = e.op("Slice", "params", e.const([p.offset]), e.const([p.offset + p.size]), axes)
        shape = e.const(np.array(p.shape, np.int64))  # int64 even for a scalar's []
        e.nodes.append(helper.make_node("Reshape", [part, shape], [p.name]))


def _forward(e: Emit, graph, logits: str, producer, frozen: set[str]) -> dict[int, dict]:
    """The model's nodes up to the logits; ops whose training differs run their training
    form, but for a BatchNormalization the user froze whole (its inference form). Returns what
    each node's gradient rule needs, by node index."""
    needed = ancestors(logits, producer)
    saved: dict[int, dict] = {}
    for k, node in enumerate(graph.node):
        if not set(node.output) & needed:
            continue
        op = OPS.get(node.op_type)
        frozen_bn = (
            node.op_type == "BatchNormalization" and {node.input[1], node.input[2]} <= frozen
        )
        saved[k] = copy_node(e, node) if op is None or frozen_bn else op.forward(e, node)
    return saved


def _loss(e: Emit, logits: str, loss: str) -> str:
    """The output `loss`; returns its gradient with respect to the logits.
    cross-entropy: L = mean_b -log softmax(z_b)[y_b];  gz = (softmax(z) - onehot(y)) / B.
    mse: L = mean (z - t)^2 over every element;  gz = 2 (z - t) / |z|."""
    if loss == "cross-entropy":
        dims = e.shape(logits)
        if dims is None or len(dims) != 2 or dims[1] is None:
            raise CompileError(f"cross-entropy needs logits [batch, classes]; {logits!r} is {dims}")
        logp = e.op("LogSoftmax", logits, axis=1)
        picked = e.op("GatherElements", logp, e.op("Unsqueeze", "y", e.const([1])), axis=1)
        value = e.op("Neg", e.op("ReduceMean", picked, keepdims=0))
        onehot = e.op("OneHot", "y", e.const(dims[1]), e.const([0.0, 1.0]), axis=-1)
        batch = e.op("Cast", e.op("Gather", e.op("Shape", logits), e.const(0)), to=_type(e))
        g = e.op("Div", e.op("Sub", e.op("Softmax", logits, axis=1), onehot), batch)
    else:
        diff = e.op("Sub", logits, "y")
        value = e.op("ReduceMean", e.op("Mul", diff, diff), keepdims=0)
        count = e.op("Cast", e.op("Size", logits), to=_type(e))
        g = e.op("Div", e.op("Mul", diff, e.const(2.0)), count)
    e.nodes.append(helper.make_node("Identity", [value], ["loss"]))
    return g


def _backward(e: Emit, graph, logits, g_logits, saved, params) -> dict[str, str]:
    """Reverse-mode: each node on the path, last first, turns its outputs' gradients into its
    inputs'. Returns the gradient of every parameter reached."""
    wanted = {p.name for p in params}
    flows = _flows(graph, saved, wanted)
    _refuse_unsupported([graph.node[k] for k in sorted(flows)])
    parts: dict[str, list[str]] = {logits: [g_logits]}
    for k in sorted(saved, reverse=True):
        node = graph.node[k]
        if k not in flows:
            continue
        gy = [_total(e, parts.pop(o, [])) for o in node.output]
        if all(g is None for g in gy):
            continue
        op = OPS[node.op_type]  # _refuse_unsupported let only the table's ops through
        if gy[0] is None:
            continue
        gx = op.backward(e, node, gy, saved[k])
        for slot in diff_slots(node):
            if slot >= len(node.input) or node.input[slot] not in flows[k]:
                continue
            g = gx[slot] if slot < len(gx) else None
            # one gradient for every input a gradient flows to: a rule that gives none is wrong
            assert g is not None, f"{node.op_type}'s rule gave no gradient for input {slot}"
            if slot in op.broadcasts(node):  # summed back over the axes it was broadcast on
                g = e.unbroadcast(g, node.input[slot], node.output[0])
            parts.setdefault(node.input[slot], []).append(g)
    return {p: g for p in wanted if (g := _total(e, parts.get(p, []))) is not None}


def _refuse_unsupported(on_path) -> None:
    """Every node on a parameter's way to the loss whose op has no row in the table, all of
    them at once, one line each (the table itself: `edgegossip model ops`)."""
    missing = [n for n in on_path if n.op_type not in OPS]
    if not missing:
        return
    lines = [f"{where(n)}: op {n.op_type} has no gradient rule" for n in missing]
    if len(lines) == 1:
        raise CompileError(f"{lines[0]} (the table: edgegossip model ops)")
    raise CompileError(
        f"{len(lines)} nodes have no gradient rule (the table: edgegossip model ops):\n"
        + "\n".join(f"  {line}" for line in lines)
    )


def _flows(graph, saved, wanted: set[str]) -> dict[int, set[str]]:
    """Node index -> its differentiable inputs that depend on a parameter: where gradients
    must flow (and nowhere else, so constants and shape computations get no backward)."""
    depends = set(wanted)
    out: dict[int, set[str]] = {}
    for k in sorted(saved):
        node = graph.node[k]
        if node.op_type not in OPS:
            if any(i in depends for i in node.input):
                out[k] = set()  # on the path, with no rule: _backward refuses it
                depends.update(node.output)
            continue
        live = {
            node.input[s]
            for s in diff_slots(node)
            if s < len(node.input) and node.input[s] in depends
        }
        if live:
            out[k] = live
            depends.update(node.output)
    return out


def _total(e: Emit, parts: list[str]) -> str | None:
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else e.op("Sum", *parts)


def _flat_grad(e: Emit, params: list[Param], grads: dict[str, str]) -> None:
    flat = []
    for p in params:
        g = grads.get(p.name)
        flat.append(e.op("Reshape", g, e.const([-1])) if g else e.const(np.zeros(p.size)))
    if flat:
        e.nodes.append(helper.make_node("Concat", flat, ["grad"], axis=0))
    else:
        e.nodes.append(helper.make_node("Identity", [e.const(np.zeros(0))], ["grad"]))


def _state(e: Emit, graph, saved, inits) -> list[tuple[str, str, tuple[int, ...]]]:
    """Each BatchNormalization's batch mean and variance as outputs `state/NODE/mean|var`:
    (output, the running statistic's initializer, its shape)."""
    out = []
    for k, s in sorted(saved.items()):
        node = graph.node[k]
        if node.op_type != "BatchNormalization" or "mean" not in s:
            continue  # not a BatchNorm, or one frozen whole: its running statistics stand
        for stat, source in (("mean", node.input[3]), ("var", node.input[4])):
            init = source if source in inits else None  # untied(): Identity copies are inits
            if init is None:
                raise CompileError(
                    f"node {node.name or node.output[0]}: BatchNormalization's running {stat} "
                    f"{source!r} is not an initializer of the model"
                )
            name = f"state/{node.name or node.output[0]}/{stat}"
            e.nodes.append(helper.make_node("Reshape", [s[stat], e.const([-1])], [name]))
            out.append((name, init, tuple(inits[init].dims)))
    return out


def untied(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each Identity of an initializer made an initializer of its own, under the
    Identity's output name (a copy where there is any; the caller's is left as it was). The
    TorchScript exporter stores equal weights once (every BatchNorm's scale starts at ones) and
    hands each module its copy through an Identity: trained through the one tensor, they would
    be one weight, where PyTorch trains one per module."""
    inits = {i.name for i in model.graph.initializer}
    if not any(n.op_type == "Identity" and n.input[0] in inits for n in model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _untie(copy.graph)
    return copy


def _untie(graph) -> None:
    inits = {i.name: i for i in graph.initializer}
    kept = []
    for node in graph.node:
        source = inits.get(node.input[0]) if node.op_type == "Identity" else None
        if source is None or node.output[0] in inits:
            kept.append(node)
            continue
        copy = onnx.TensorProto()
        copy.CopyFrom(source)
        copy.name = node.output[0]
        graph.initializer.append(copy)
        inits[copy.name] = copy
    del graph.node[:]
    graph.node.extend(kept)


def _type(e: Emit) -> int:
    return helper.np_dtype_to_tensor_dtype(e.dtype)


def _dims(shape: list[int | None] | None) -> list[int | str]:
    """A value_info shape: known dims as numbers, the others named (the batch first)."""
    if shape is None:
        return ["batch"]
    return [d if d is not None else ("batch" if i == 0 else f"d{i}") for i, d in enumerate(shape)]


def _live(nodes, inits, outputs: list[str]):
    """Only the nodes (and constants) an output depends on: a rule gives every input's
    gradient, and onnxruntime runs the ones nobody reads (the data input's, for one)."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if needed & set(node.output):
            kept.append(node)
            needed.update(node.input)
    return kept[::-1], [i for i in inits if i.name in needed]


def _model(e, graph, x_info, logits, loss, params, state, opsets) -> onnx.ModelProto:
    t = _type(e)
    total = sum(p.size for p in params)
    y = (
        helper.make_tensor_value_info("y", TensorProto.INT64, ["batch"])
        if loss == "cross-entropy"
        else helper.make_tensor_value_info("y", t, _dims(e.shape(logits)))
    )
    inputs = [helper.make_tensor_value_info("params", t, [total]), x_info, y]
    outputs = [
        helper.make_tensor_value_info("loss", t, []),
        helper.make_tensor_value_info("grad", t, [total]),
        helper.make_tensor_value_info(logits, t, _dims(e.shape(logits))),
    ]
    for name, _, shape in state:
        outputs.append(helper.make_tensor_value_info(name, t, list(shape)))
    keep = [i for i in graph.initializer if i.name not in {p.name for p in params}]
    nodes, inits = _live(e.nodes, keep + e.inits, [o.name for o in outputs])
    g = helper.make_graph(nodes, "edgegossip_train", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=list(opsets), producer_name="edgegossip")
    version = next(o.version for o in opsets if o.domain in ("", "ai.onnx"))
    m.ir_version = RUNTIMES[version][1]  # what the oldest runtime for this opset reads
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as err:
        raise CompileError(
            f"the training graph does not check: {str(err).splitlines()[0]}"
        ) from None
    return m
