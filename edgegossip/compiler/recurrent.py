"""ONNX's recurrent ops (GRU, LSTM, RNN) unrolled over their sequence into the table's primitive
ops, so that backpropagation through time is the primitives' rules (as expand.py does for the
function ops, which have spec bodies; these have none). Both of torch's exporters write
nn.GRU and nn.LSTM as these ops, with the weights in ONNX's gate order.

The sequence length must be static (an export with a fixed number of steps); the ops' default
activations only, no clip, no sequence_lens, no peepholes, LSTM's input_forget off: anything
else is refused in one line naming the layer. Per direction and step (ONNX's equations, gates
as the spec orders them in W, R and B):
  GRU   z = s(x Wz' + h Rz' + bz), r = s(x Wr' + h Rr' + br),
        n = tanh(x Wh' + r (h Rh' + Rbh) + Wbh) (linear_before_reset, torch's)
          or tanh(x Wh' + (r h) Rh' + Rbh + Wbh),  h = n + z (h - n)
  LSTM  i, o, f, c~ = s, s, s, tanh of (x W' + h R' + b) split in four,
        c = f c + i c~,  h = o tanh(c)
  RNN   h = tanh(x W' + h R' + b)
The input's projection is one MatMul over every step; each step's recurrent projection is one
MatMul of h against R' for all gates at once."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from edgegossip.compiler.errors import CompileError, where

RECURRENT = {"GRU": 3, "LSTM": 4, "RNN": 1}  # op -> gates in W, R and half of B
DEFAULT_ACTIVATIONS = {
    "GRU": ["Sigmoid", "Tanh"],
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
    "RNN": ["Tanh"],
}


def unroll(model: onnx.ModelProto) -> onnx.ModelProto:
    """model with each recurrent node replaced by its steps (a copy where any is)."""
    if not any(_recurrent(n) for n in model.graph.node):
        return model
    shapes = shapes_of(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    for node in copy.graph.node:
        nodes.extend(_Unrolled(node, shapes).nodes if _recurrent(node) else [node])
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def shapes_of(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Each tensor's dims as onnx infers them ({} where inference fails)."""
    try:
        g = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # the compiler's own inference names what is wrong
        return {}
    out = {}
    for vi in (*g.input, *g.value_info, *g.output):
        if vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    return out


def _recurrent(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in RECURRENT


class _Unrolled:
    """One recurrent node's steps as primitive nodes, carrying its metadata (so a refusal
    further on still names the user's layer)."""

    def __init__(self, node: onnx.NodeProto, shapes: dict[str, list[int | None]]):
        self.node, self.op = node, node.op_type
        self.prefix = f"{node.name or node.output[0]}/unrolled"
        self.nodes: list[onnx.NodeProto] = []
        self._n = 0
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        self._check(a)
        ins = list(node.input) + [""] * (8 - len(node.input))
        x, w, r, b = ins[:4]
        layout = int(a.get("layout", 0))
        xdims = shapes.get(x)
        steps = xdims[1 if layout else 0] if xdims and len(xdims) == 3 else None
        if not steps:
            self._refuse("a sequence of unknown length (export it with a fixed number of steps)")
        if not a.get("hidden_size"):
            self._refuse("no hidden_size")
        bidirectional = a.get("direction", b"forward") in (b"bidirectional", "bidirectional")
        dirs, hidden = 2 if bidirectional else 1, int(a["hidden_size"])
        self.hidden, self.gates = hidden, RECURRENT[self.op]
        self.lbr = bool(a.get("linear_before_reset", 0))
        # [batch, steps, input]: each step's input a slice along axis 1, never the batch axis
        xb = self.emit("Transpose", x, perm=[1, 0, 2]) if layout == 0 else x
        ws, rs = self.directions(w, dirs), self.directions(r, dirs)
        bs = self.directions(b, dirs) if b else [None] * dirs
        h0s = self.initial(ins[5], dirs, layout)
        c0s = self.initial(ins[6], dirs, layout) if self.op == "LSTM" else [None] * dirs
        reverse = a.get("direction", b"forward") in (b"reverse", "reverse")
        ys, hs, cs = [], [], []
        for d in range(dirs):
            backwards = reverse or d == 1
            y, h, c = self.direction(xb, steps, ws[d], rs[d], bs[d], h0s[d], c0s[d], backwards)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        self.outputs(node, ys, hs, cs, layout)

    # --- the refusals

    def _refuse(self, why: str):
        raise CompileError(f"{where(self.node)}: {self.op} with {why}")

    def _check(self, a: dict) -> None:
        given = [v.decode() if isinstance(v, bytes) else v for v in a.get("activations", [])]
        defaults = DEFAULT_ACTIVATIONS[self.op]
        if given and given != defaults * (len(given) // len(defaults)):
            self._refuse(f"activations {given} (only {defaults} are trained)")
        if a.get("clip") is not None:
            self._refuse("clip")
        if a.get("input_forget", 0):
            self._refuse("input_forget")
        ins = list(self.node.input)
        if len(ins) > 4 and ins[4]:
            self._refuse("sequence_lens (every sequence must have the full length)")
        if self.op == "LSTM" and len(ins) > 7 and ins[7]:
            self._refuse("peepholes (P)")

    # --- building blocks

    def emit(self, op: str, *inputs: str, n_out: int = 1, **attrs) -> str:
        return self.emit_n(op, *inputs, n_out=n_out, **attrs)[0]

    def emit_n(self, op: str, *inputs: str, n_out: int = 1, **attrs) -> list[str]:
        self._n += 1
        outs = [f"{self.prefix}/{op}_{self._n}_{k}" for k in range(n_out)]
        n = helper.make_node(op, list(inputs), outs, name=f"{self.prefix}/{op}_{self._n}", **attrs)
        n.metadata_props.extend(self.node.metadata_props)
        self.nodes.append(n)
        return outs

    def ints(self, values: list[int]) -> str:
        return self.emit("Constant", value=numpy_helper.from_array(np.array(values, np.int64)))

    def split(self, x: str, axis: int, sizes: list[int]) -> list[str]:
        if len(sizes) == 1:
            return [x]
        return self.emit_n("Split", x, self.ints(sizes), axis=axis, n_out=len(sizes))

    def directions(self, t: str, dirs: int) -> list[str]:
        """[dirs, ...] -> each direction's [...]."""
        return [self.emit("Squeeze", p, self.ints([0])) for p in self.split(t, 0, [1] * dirs)]

    def initial(self, t: str, dirs: int, layout: int) -> list[str | None]:
        """initial_h or initial_c ([dirs, batch, hidden]; layout 1: [batch, dirs, hidden]) ->
        each direction's [batch, hidden]; None where absent (zeros)."""
        if not t:
            return [None] * dirs
        axis = 1 if layout else 0
        return [self.emit("Squeeze", p, self.ints([axis])) for p in self.split(t, axis, [1] * dirs)]

    # --- one direction

    def direction(self, xb, steps, w, r, b, h, c, backwards):
        """[batch, hidden] states step by step; returns (every step's h as [steps, batch,
        hidden] in time order, the last h, the last c)."""
        H, G = self.hidden, self.gates
        wb = rb = None
        if b is not None:
            wb, rb = self.split(b, 0, [G * H, G * H])
        proj = self.emit("MatMul", xb, self.emit("Transpose", w, perm=[1, 0]))  # [B, S, G H]
        if wb is not None:
            proj = self.emit("Add", proj, wb)
        xs = [self.emit("Squeeze", p, self.ints([1])) for p in self.split(proj, 1, [1] * steps)]
        rt = self.emit("Transpose", r, perm=[1, 0])  # [H, G H]
        if self.op == "GRU" and not self.lbr:
            rt_zr, rt_h = self.split(rt, 1, [2 * H, H])
            rb_zr, rb_h = self.split(rb, 0, [2 * H, H]) if rb is not None else (None, None)
        outs: dict[int, str] = {}
        for t in reversed(range(steps)) if backwards else range(steps):
            x = xs[t]
            if h is None:  # zeros of the state's shape and type: a gate's input less itself
                gate = self.split(x, 1, [H] * G)[0]
                h = self.emit("Sub", gate, gate)
            if self.op == "LSTM" and c is None:
                c = self.emit("Sub", h, h)
            if self.op == "GRU" and not self.lbr:
                h = self.gru_reset_first(x, h, rt_zr, rt_h, rb_zr, rb_h)
            else:
                rec = self.emit("MatMul", h, rt)
                if rb is not None:
                    rec = self.emit("Add", rec, rb)
                h, c = self.step(x, rec, h, c)
            outs[t] = h
        y = self.emit(
            "Concat",
            *(self.emit("Unsqueeze", outs[t], self.ints([0])) for t in range(steps)),
            axis=0,
        )
        return y, h, c

    def step(self, x, rec, h, c):
        """One step from the input's and the state's projections (all gates, biases in)."""
        H = self.hidden
        if self.op == "RNN":
            return self.emit("Tanh", self.emit("Add", x, rec)), None
        if self.op == "LSTM":
            i, o, f, cc = self.split(self.emit("Add", x, rec), 1, [H] * 4)
            c = self.emit(
                "Add",
                self.emit("Mul", self.emit("Sigmoid", f), c),
                self.emit("Mul", self.emit("Sigmoid", i), self.emit("Tanh", cc)),
            )
            return self.emit("Mul", self.emit("Sigmoid", o), self.emit("Tanh", c)), c
        xz, xr, xh = self.split(x, 1, [H] * 3)  # GRU, linear_before_reset
        hz, hr, hh = self.split(rec, 1, [H] * 3)
        z = self.emit("Sigmoid", self.emit("Add", xz, hz))
        r = self.emit("Sigmoid", self.emit("Add", xr, hr))
        n = self.emit("Tanh", self.emit("Add", xh, self.emit("Mul", r, hh)))
        return self.emit("Add", n, self.emit("Mul", z, self.emit("Sub", h, n))), None

    def gru_reset_first(self, x, h, rt_zr, rt_h, rb_zr, rb_h):
        """A GRU step with the reset applied before the recurrent projection."""
        H = self.hidden
        xz, xr, xh = self.split(x, 1, [H] * 3)
        zr = self.emit("MatMul", h, rt_zr)
        if rb_zr is not None:
            zr = self.emit("Add", zr, rb_zr)
        hz, hr = self.split(zr, 1, [H, H])
        z = self.emit("Sigmoid", self.emit("Add", xz, hz))
        r = self.emit("Sigmoid", self.emit("Add", xr, hr))
        rec = self.emit("MatMul", self.emit("Mul", r, h), rt_h)
        if rb_h is not None:
            rec = self.emit("Add", rec, rb_h)
        n = self.emit("Tanh", self.emit("Add", xh, rec))
        return self.emit("Add", n, self.emit("Mul", z, self.emit("Sub", h, n)))

    # --- the node's outputs

    def outputs(self, node, ys, hs, cs, layout) -> None:
        """Y [steps, dirs, batch, hidden] (layout 1: [batch, steps, dirs, hidden]), Y_h and
        Y_c [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]), under the node's own
        output names, each only if used."""
        names = list(node.output) + [""] * 3
        if names[0]:
            y = self.emit(
                "Concat", *(self.emit("Unsqueeze", y, self.ints([1])) for y in ys), axis=1
            )
            if layout:
                y = self.emit("Transpose", y, perm=[2, 0, 1, 3])
            self.emit_as(names[0], "Identity", y)
        for name, last in ((names[1], hs), (names[2], cs)):
            if name:
                axis = 1 if layout else 0
                s = self.emit(
                    "Concat",
                    *(self.emit("Unsqueeze", v, self.ints([axis])) for v in last),
                    axis=axis,
                )
                self.emit_as(name, "Identity", s)

    def emit_as(self, name: str, op: str, *inputs: str) -> None:
        n = helper.make_node(op, list(inputs), [name], name=f"{self.prefix}/{name}")
        n.metadata_props.extend(self.node.metadata_props)
        self.nodes.append(n)
