"""Appending nodes to the training graph: unique names, constants of the graph's float type, and
the shapes shape inference found for the source model's tensors."""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, helper, numpy_helper


class Emit:
    """The training graph as it is built: nodes, constants, and what is known of shapes."""

    def __init__(
        self,
        dtype: np.dtype | type,
        shapes: dict[str, list[int | None]],
        values: dict[str, np.ndarray],
        types: dict[str, np.dtype] | None = None,
    ):
        self.dtype = np.dtype(dtype)  # the model's float type (float32; float64 in tests)
        self.shapes = shapes  # source tensor -> dims (None where symbolic, e.g. the batch)
        self.values = values  # source tensors known before the step: initializers, Constants
        # source tensor -> its element type, where it differs from the graph's float type (a
        # function body computing in another, as LayerNormalization's stash_type)
        self.types = types or {}
        self.nodes: list[NodeProto] = []
        self.inits: list = []
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"eg/{hint}/{self._n}"

    def const(self, value, dtype=None, like: str | None = None) -> str:
        """A constant initializer: floats in the graph's type (or in the float type of the source
        tensor `like`, which the constant meets), integers int64."""
        arr = np.asarray(value)
        if dtype is None and arr.dtype.kind == "f" and like is not None:
            dtype = self.types.get(like)
        if dtype is None:
            dtype = self.dtype if arr.dtype.kind == "f" else np.int64
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(arr.astype(dtype), name))
        return name

    def op(self, kind: str, *inputs: str, n_out: int = 1, **attrs) -> str:
        """One node; returns its first output's name (n_out > 1: all, via op_n)."""
        return self.op_n(kind, *inputs, n_out=n_out, **attrs)[0]

    def op_n(self, kind: str, *inputs: str, n_out: int = 1, **attrs) -> list[str]:
        outs = [self.fresh(kind) for _ in range(n_out)]
        self.nodes.append(helper.make_node(kind, list(inputs), outs, **attrs))
        return outs

    def shape(self, name: str) -> list[int | None] | None:
        """The dims shape inference found for a source tensor, None if it found none."""
        return self.shapes.get(name)

    def static(self, name: str, what: str) -> list[int]:
        """The dims of a source tensor, all of them known, or a CompileError naming what
        needs them."""
        from edgegossip.compiler.errors import CompileError

        dims = self.shape(name)
        if not dims or any(d is None for d in dims[1:]):
            raise CompileError(f"{what} needs the static shape of {name!r} (got {dims or '?'})")
        return [int(d) if d is not None else -1 for d in dims]

    def rank(self, name: str, what: str) -> int:
        """How many axes a source tensor has, whatever their sizes; a CompileError naming what
        needs it if shape inference did not find it."""
        from edgegossip.compiler.errors import CompileError

        dims = self.shape(name)
        if dims is None:
            raise CompileError(f"{what} needs the rank of {name!r}")
        return len(dims)

    def reduce_sum(self, x: str, axes: list[int], keepdims: int) -> str:
        if not axes:
            return x
        return self.op("ReduceSum", x, self.const(axes), keepdims=keepdims)

    def unbroadcast(self, g: str, operand: str, out: str) -> str:
        """The gradient g of a broadcast result `out`, summed back to `operand`'s shape."""
        a, o = self.shape(operand), self.shape(out)
        if a is None or o is None or a == o:
            return g
        lead = len(o) - len(a)
        axes = list(range(lead))
        g = self.reduce_sum(g, axes, keepdims=0)
        keep = [i for i, d in enumerate(a) if d == 1 and o[i + lead] != 1]  # size-1 dims
        return self.reduce_sum(g, keep, keepdims=1)
