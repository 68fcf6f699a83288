"""Every row of the compiler's op table (edgegossip/compiler/ops.py) checked by the graphs it
carries: each case compiled and its gradient compared with float64 central differences of the
compiled loss, every parameter (onnx's reference evaluator runs the training graph, so the
rules are checked as math, not as one runtime's kernels). A row without a case fails: an op
the table claims is never untested. As PyTorch's gradcheck over its op database."""

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgegossip.compiler.build import compile_model
from edgegossip.compiler.ops import EXPANDED, OPS, Case
from tests.test_compiler import BATCH, _check, _model

CASES = [(op, c) for op, row in sorted(OPS.items()) for c in row.cases]
EXPANDED_CASES = [(op, c) for op, cases in sorted(EXPANDED.items()) for c in cases]


def build(c: Case, rng: np.random.Generator):
    nodes = [
        helper.make_node(op, list(ins), list(outs), name=outs[0], **attrs)
        for op, ins, outs, attrs in c.nodes
    ]
    inits = {
        k: (v if isinstance(v, np.ndarray) else rng.uniform(c.low, c.high, v)) for k, v in c.inits
    }
    model = _model(nodes, inits, list(c.x), c.nodes[-1][2][0])
    model.opset_import[0].version = c.opset
    return model


def test_every_row_has_a_case_that_uses_its_op():
    for op, row in OPS.items():
        assert row.cases, f"{op} has no case: add one to its row in compiler/ops.py"
        for c in row.cases:
            assert op in {n[0] for n in c.nodes}, f"{op}'s case {c.id!r} does not use it"


@pytest.mark.parametrize("op, c", CASES, ids=[f"{op}: {c.id}" for op, c in CASES])
def test_every_rule_against_central_differences(op, c):
    rng = np.random.default_rng(7)
    model = build(c, rng)
    if OPS[op].random:
        _check_random(model, c, rng)
    else:
        _check(model, list(c.x), c.loss, c.eps, c.rtol, c.atol, c.runtime)


@pytest.mark.parametrize("op, c", EXPANDED_CASES, ids=[f"{op}: {c.id}" for op, c in EXPANDED_CASES])
def test_every_function_op_through_its_body(op, c):
    """Issue 55, item 2: ONNX's function ops (LayerNormalization, Gelu, HardSwish, ...) and its
    recurrent ops (GRU, LSTM, RNN) have no rule of their own; they are expanded to their spec
    bodies, or unrolled over their steps, and trained by the primitives' rules: checked the
    same way, the op must really have been replaced, and the result must compute what onnx's
    reference implementation of the op computes."""
    model = build(c, np.random.default_rng(7))
    compiled = _check(model, list(c.x), c.loss, c.eps, c.rtol, c.atol, c.runtime)
    assert op not in {n.op_type for n in compiled.train.graph.node}
    # and it computes what onnx's own op computes (its reference implementation)
    x = np.random.default_rng(8).normal(size=(BATCH, *c.x))
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    out = c.nodes[-1][2][0]
    got = ReferenceEvaluator(compiled.train).run(
        [out], {"params": compiled.initial, "x": x, "y": np.zeros_like(want)}
    )[0]
    # float64 throughout but for a body computing its statistics in float32 (LayerNormalization's
    # stash_type), which rounds at 1e-7: a wrong expansion is off by far more
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


def _check_random(model, c: Case, rng) -> None:
    """A random op (Dropout) draws in every step, so no difference can check it: the gradient
    of mse through x * W and the op is checked against g m / (1 - r) with the mask m the step
    drew (the case is that graph)."""
    compiled = compile_model(model, "mse")
    x = rng.normal(size=(BATCH, *c.x))
    y = rng.normal(size=(BATCH, *c.x))
    loss, grad, z = ReferenceEvaluator(compiled.train).run(
        ["loss", "grad", "z"], {"params": compiled.initial, "x": x, "y": y}
    )
    kept = z != 0
    ratio = float(numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "r")))
    assert 0 < kept.mean() < 1
    gz = 2 * (z - y) / z.size
    np.testing.assert_allclose(grad, (gz * kept / (1 - ratio) * x).sum(axis=0), rtol=1e-10)
