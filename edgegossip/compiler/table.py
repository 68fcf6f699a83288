"""The op table's definitions: a row (Op), the graphs that check it (Case), and what every
rule shares. The rows themselves are compiler/ops.py; the rules, compiler/rules/."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from onnx import NodeProto, helper

from edgegossip.compiler.emit import Emit

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


def attrs_of(node: NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def onnx_type(e: Emit, like: str | None = None) -> int:
    """The graph's float type as ONNX names it (or that of the source tensor `like`)."""
    return helper.np_dtype_to_tensor_dtype(e.types.get(like, e.dtype) if like else e.dtype)
