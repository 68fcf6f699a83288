"""What a compiled model trains, and what of the model it would leave untrained.

A framework trains every weight of a model; the compiler trains the float initializers that
reach the loss through the inputs its rules differentiate. A weight that reaches the loss
another way (through an op with no rule that no trained weight feeds: a recurrent layer over
the input, a lookup behind a cast) would silently stay as exported while the rest trains. So
every float initializer of more than one element that reaches the loss is trained, or is the
running statistics of a BatchNormalization (state), or is a constant an op's row declares
its input (Resize's scales, Clip's bounds, a Pad value): anything else is refused, naming it
and the op it feeds, unless the user accepts it (`model compile --accept-untrained`)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from edgegossip.compiler.errors import CompileError, literal_list, where
from edgegossip.compiler.ops import OPS, diff_slots

FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def untrained(
    graph, params, state, live: set[str], frozen: set[str]
) -> list[tuple[str, list[int], str]]:
    """(name, dims, the op it feeds) of each weight that reaches the loss and is neither
    trained, nor BatchNorm's running statistics, nor frozen by the user."""
    running = {n.input[k] for n in graph.node if n.op_type == "BatchNormalization" for k in (3, 4)}
    trained = {p.name for p in params} | {s[1] for s in state} | frozen | running
    out = []
    for init in graph.initializer:
        if (
            init.data_type not in FLOATS
            or init.name in trained
            or init.name not in live
            or int(np.prod(init.dims, dtype=np.int64)) < 2
        ):
            continue
        feeds = [(n, k) for n in graph.node for k, i in enumerate(n.input) if i == init.name]
        unknown = [n for n, k in feeds if n.op_type not in OPS or k in diff_slots(n)]
        if unknown:
            out.append((init.name, list(init.dims), unknown[0].op_type))
    return out


def refuse_untrained(found: list[tuple[str, list[int], str]]) -> None:
    if not found:
        return
    name, dims, op = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise CompileError(
        f"weight {name} {dims} would not be trained: it reaches the loss only through {op}, "
        f"which the compiler does not differentiate{more}; `model compile --accept-untrained` "
        "trains the rest without it"
    )


FOLDED_INTO = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # what an exporter folds BatchNorm into


def exporter_changes(graph, params) -> list[str]:
    """One line for each change the exporter made to the user's model that the compiler can
    tell, with the export setting that keeps the model as written: a Dropout exported in eval
    mode (dynamo leaves an Identity with the Dropout's module metadata; TorchScript leaves no
    trace), a BatchNorm folded into the op before it (dynamo's optimize=True leaves the
    BatchNorm's metadata on that op), weights computed by TorchScript's constant folding (a
    BatchNorm folded, a weight transposed: named onnx::..., not as the user's layers)."""
    out = []
    for n in graph.node:
        classes = _classes(n)
        if n.op_type == "Identity" and any(".dropout." in c for c in classes):
            out.append(
                f"{where(n)}: exported in eval mode, this Dropout is gone and the devices train "
                "without it; export the model in train mode (Net().train()) to keep it"
            )
        elif n.op_type in FOLDED_INTO and any(".batchnorm." in c for c in classes):
            out.append(
                f"{where(n)}: the exporter folded this BatchNorm into the {n.op_type} before "
                "it and the devices train without it; export with optimize=False to keep it"
            )
    computed = [p.name for p in params if p.name.startswith("onnx::")]
    if computed:
        out.append(
            f"weights {', '.join(computed[:3])}{' ...' if len(computed) > 3 else ''} were "
            "computed by the exporter's constant folding (a BatchNorm folded into them, or a "
            "transpose), not named as your layers; export with do_constant_folding=False to "
            "train your model's own weights and layers"
        )
    return out


def _classes(node) -> list[str]:
    """The module classes the dynamo exporter records a node came from (its class_hierarchy),
    without the aten op at its end."""
    meta = {p.key: p.value for p in node.metadata_props}
    return literal_list(meta.get("pkg.torch.onnx.class_hierarchy"))[:-1]
