"""ONNX's function ops expanded to their bodies, so that the table's primitive rules serve them
(as micrograd builds `a - b` from `a + (-b)`): LayerNormalization, Gelu, HardSwish,
HardSigmoid, Elu, Selu, Softplus, PRelu, Mish, GroupNormalization, ... Each op whose schema
defines it as a function of other ops (onnx.defs: a plain or a context-dependent function
body, at the newest version not past the model's opset) and that has no row of its own in the
table is replaced by its body, inlined by onnx's inliner; bodies that hold function ops
themselves are expanded in turn. The expanded graph computes what the op does (the bodies are
the spec's definitions), and its gradient is then the primitives'."""

from __future__ import annotations

from typing import Any

import onnx
import onnx.inliner
from onnx import defs, helper, shape_inference

DOMAIN = "edgegossip.expand"  # the expanded ops' domain while onnx's inliner runs
ROUNDS = 8  # bodies within bodies: HardSwish holds HardSigmoid


def expand(model: onnx.ModelProto, keep: set[str], opset: int) -> onnx.ModelProto:
    """model with every standard op outside `keep` that has a function body expanded (a copy
    where anything is: the caller's model is left as it was)."""
    if not any(_has_body(n, keep, opset) for n in model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    model = copy
    for _ in range(ROUNDS):
        bodies = _bodies(model, keep, opset)
        if not bodies:
            break
        model = _inline(model, bodies)
    return model


def _function_versions(node: onnx.NodeProto, keep: set[str], opset: int):
    """(schema, context-dependent body versions, plain body versions) not past opset, of a
    standard node outside keep whose op has a body; None otherwise."""
    if node.domain not in ("", "ai.onnx") or node.op_type in keep:
        return None
    try:
        schema: Any = defs.get_schema(node.op_type, opset)  # its stubs lack the function API
    except defs.SchemaError:
        return None
    ctx = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    plain = [v for v in schema.function_opset_versions if v <= opset]
    return (schema, ctx, plain) if ctx or plain else None


def _has_body(node: onnx.NodeProto, keep: set[str], opset: int) -> bool:
    return _function_versions(node, keep, opset) is not None


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Each tensor's type (a context-dependent body depends on its inputs' types)."""
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    out = {v.name: v.type for v in (*g.input, *g.value_info, *g.output)}
    for i in g.initializer:
        out[i.name] = helper.make_tensor_type_proto(i.data_type, list(i.dims))
    return out


def _bodies(model: onnx.ModelProto, keep: set[str], opset: int) -> list[onnx.FunctionProto]:
    """The body of each expandable node, named for the node, the node renamed to call it."""
    found: list[onnx.FunctionProto] = []
    types: dict[str, onnx.TypeProto] | None = None
    for k, node in enumerate(model.graph.node):
        found_versions = _function_versions(node, keep, opset)
        if found_versions is None:
            continue
        schema, ctx, plain = found_versions
        if ctx:
            types = types if types is not None else _types(model)
            if any(i and i not in types for i in node.input):
                continue  # its inputs' types unknown: left for the refusal to name
            ins = [types[i].SerializeToString() for i in node.input if i]
            raw = schema.get_context_dependent_function_with_opset_version(
                max(ctx), node.SerializeToString(), ins
            )
        else:
            raw = schema.get_function_with_opset_version(max(plain))
        if not raw:
            continue
        _spell_out_defaults(node, schema)
        body = onnx.FunctionProto()
        body.ParseFromString(raw)
        body.domain, body.name = DOMAIN, f"{node.op_type}_{k}"
        del body.opset_import[:]
        body.opset_import.append(helper.make_opsetid("", opset))
        node.domain, node.op_type = DOMAIN, body.name
        found.append(body)
    return found


def _spell_out_defaults(node: onnx.NodeProto, schema) -> None:
    """The attributes the node leaves at their defaults, written on it: a body refers to its
    op's attributes by name, and onnx's inliner fills in only those the calling node holds."""
    given = {a.name for a in node.attribute}
    for name, a in schema.attributes.items():
        if name not in given and a.default_value.type != onnx.AttributeProto.UNDEFINED:
            value = onnx.AttributeProto()
            value.CopyFrom(a.default_value)
            value.name = name
            node.attribute.append(value)


def _inline(model: onnx.ModelProto, bodies: list[onnx.FunctionProto]) -> onnx.ModelProto:
    model.functions.extend(bodies)
    model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    model = onnx.inliner.inline_local_functions(model)
    kept = [o for o in model.opset_import if o.domain != DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    del model.functions[:]
    return model
