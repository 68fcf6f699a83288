"""What `model compile` refuses: one error, one line, naming the node and the op."""

from __future__ import annotations

import ast

import onnx

from edgegossip.errors import UsageError


class CompileError(UsageError, ValueError):
    """The model cannot be compiled for training (an op outside the table, a shape that must be
    known, an input that is not what the loss needs); exit 2, nothing written."""


def where(node: onnx.NodeProto) -> str:
    """The node as the user can find it: the layer of their model it came from (the dynamo
    exporter's name scopes and module class, or the TorchScript exporter's /layer/Op node
    names) beside the node's own name."""
    meta = {p.key: p.value for p in node.metadata_props}
    name = node.name or node.output[0]
    scopes = literal_list(meta.get("pkg.torch.onnx.name_scopes"))
    classes = literal_list(meta.get("pkg.torch.onnx.class_hierarchy"))
    if len(scopes) > 2:  # ['', 'rnn', 'gru']: the model, its layers, the aten op
        layer = ".".join(scopes[1:-1])
        kind = classes[-2].rsplit(".", 1)[-1] if len(classes) >= 2 else ""
        return f"layer {layer}" + (f" ({kind})" if kind else "") + f", node {name}"
    parts = [p for p in name.split("/") if p]
    if name.startswith("/") and len(parts) > 1:  # TorchScript: /rnn/GRU
        return f"layer {'.'.join(parts[:-1])}, node {name}"
    return f"node {name}"


def literal_list(text: str | None) -> list[str]:
    """A list an exporter wrote into node metadata as Python text, as strings; [] if not one."""
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []
