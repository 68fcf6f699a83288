"""Issue 43: `model compile` beyond one op at a time (each row of the op table is checked by its
own cases in tests/test_op_table.py, with the helpers here): ops together, MaxPool's ties,
BatchNorm's state, the refusals, the training graph in stock onnxruntime in float32, and models
exported from PyTorch against PyTorch's gradients."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from edgegossip.compiler.build import Choice, compile_model
from edgegossip.compiler.errors import CompileError

BATCH = 3
RNG = np.random.default_rng(7)


def _model(nodes, inits: dict, x_shape, out: str, dtype=np.float64) -> onnx.ModelProto:
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", t, ["batch", *x_shape])],
        [helper.make_tensor_value_info(out, t, None)],
        [numpy_helper.from_array(_typed(v, dtype), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _typed(v, dtype) -> np.ndarray:
    """Floats in the model's type, but a float32 array as it is: an input ONNX types so
    whatever the model's type (Resize's scales)."""
    a = np.asarray(v)
    return a.astype(dtype) if a.dtype.kind == "f" and a.dtype != np.float32 else a


def n(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, name=outputs[0], **attrs)


def w(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape)


def _run(train, params, x, y, runtime="reference"):
    if runtime == "reference":
        loss, grad = ReferenceEvaluator(train).run(
            ["loss", "grad"], {"params": params, "x": x, "y": y}
        )
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(train.SerializeToString(), providers=["CPUExecutionProvider"])
        loss, grad = sess.run(["loss", "grad"], {"params": params, "x": x, "y": y})
    return float(loss), grad


def _infer(model, x, runtime="reference"):
    """The source model's output on x."""
    if runtime == "reference":
        return ReferenceEvaluator(model).run(None, {"x": x})[0]
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _check(model, x_shape, loss="mse", eps=1e-6, rtol=1e-5, atol=1e-8, runtime="reference"):
    """The compiled gradient against central differences of the compiled loss, every
    parameter, run by onnx's reference evaluator (or onnxruntime, in float64 too)."""
    c = compile_model(model, loss)
    x = RNG.normal(size=(BATCH, *x_shape))
    if loss == "mse":
        logits = _infer(model, x, runtime)
        y = RNG.normal(size=logits.shape)
    else:
        y = RNG.integers(0, c.output_shape[0], BATCH).astype(np.int64)
    params = c.initial.astype(np.float64)
    value, grad = _run(c.train, params, x, y, runtime)
    numeric = np.empty_like(params)
    for i in range(len(params)):
        up, down = params.copy(), params.copy()
        up[i] += eps
        down[i] -= eps
        diff = _run(c.train, up, x, y, runtime)[0] - _run(c.train, down, x, y, runtime)[0]
        numeric[i] = diff / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=rtol, atol=atol)
    assert np.isfinite(value)
    return c


def test_shape_ops_reshape_flatten_transpose_squeeze_concat():
    m = _model(
        [
            n("Mul", ["x", "W"], ["h"]),
            n("Transpose", ["h"], ["t"], perm=[0, 2, 1]),
            n("Flatten", ["t"], ["f"], axis=1),
            n("Unsqueeze", ["f", "ax"], ["u"]),
            n("Squeeze", ["u", "ax"], ["s"]),
            n("Mul", ["x2", "V"], ["v"]),
            n("Reshape", ["x", "flat"], ["x2"]),
            n("Concat", ["s", "v"], ["c"], axis=1),
            n("MatMul", ["c", "M"], ["z"]),
        ],
        {
            "W": w(2, 4),
            "V": w(8),
            "M": w(16, 3),
            "ax": np.array([1], np.int64),
            "flat": np.array([0, 8], np.int64),
        },
        [2, 4],
        "z",
    )
    # the nodes out of order (Reshape after its consumer) are not what ONNX allows: sort them
    order = ["h", "t", "f", "u", "s", "x2", "v", "c", "z"]
    nodes = sorted(m.graph.node, key=lambda nd: order.index(nd.output[0]))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    c = _check(m, [2, 4])
    assert "ax" not in {p.name for p in c.params}  # an integer initializer is no parameter


def _first_max_grad(h: np.ndarray, g: np.ndarray, k: int) -> np.ndarray:
    """dz/dh of 2-D max pooling by k x k tiles, g at each window's first maximum."""
    out = np.zeros_like(h)
    for b, c, i, j in np.ndindex(*g.shape):
        window = h[b, c, i * k : i * k + k, j * k : j * k + k]
        a, d = np.unravel_index(np.argmax(window), window.shape)  # argmax: the first
        out[b, c, i * k + a, j * k + d] = g[b, c, i, j]
    return out


def test_maxpool_ties_go_to_each_windows_first_maximum_as_its_indices_say():
    """Integer inputs tie in most windows (and ReLU's zeros do in real models): the tiled rule
    and the rule over MaxPool's indices give each window's gradient to the same element."""
    import onnxruntime as ort

    x = RNG.integers(0, 3, (4, 2, 6, 7)).astype(np.float32)
    grads = []
    for outputs in (["z"], ["z", "i"]):  # asking for the indices takes the scatter rule
        m = _model(
            [
                n("Mul", ["x", "W"], ["h"]),
                n("MaxPool", ["h"], outputs, kernel_shape=[2, 2], strides=[2, 2]),
            ],
            {"W": np.ones((2, 6, 7))},
            [2, 6, 7],
            "z",
            dtype=np.float32,
        )
        c = compile_model(m, "mse")
        assert ("ScatterElements" in {k.op_type for k in c.train.graph.node}) == (len(outputs) > 1)
        sess = ort.InferenceSession(c.train.SerializeToString(), providers=["CPUExecutionProvider"])
        y = np.zeros((4, 2, 3, 3), np.float32)
        (grad,) = sess.run(["grad"], {"params": c.initial.astype(np.float32), "x": x, "y": y})
        grads.append(grad)
    z = x[:, :, :6, :6].reshape(4, 2, 3, 2, 3, 2).max(axis=(3, 5))
    expected = (x * _first_max_grad(x, 2 * z / z.size, 2)).sum(axis=0)  # mse: dL/dz = 2z/N
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_allclose(grads[0], expected.ravel(), rtol=1e-6)


def test_batchnorm_on_batch_statistics_and_its_state():
    m = _model(
        [
            n("Conv", ["x", "W"], ["h"]),
            n("BatchNormalization", ["h", "g", "b", "rm", "rv"], ["z"], epsilon=1e-3),
        ],
        {"W": w(3, 2, 2, 2), "g": w(3, low=0.5), "b": w(3), "rm": np.zeros(3), "rv": np.ones(3)},
        [2, 4, 4],
        "z",
    )
    c = _check(m, [2, 4, 4])
    assert [p.name for p in c.params] == ["W", "g", "b"]  # the running statistics are state
    assert [s[1] for s in c.state] == ["rm", "rv"]
    x = RNG.normal(size=(BATCH, 2, 4, 4))
    out = ReferenceEvaluator(c.train).run(
        None, {"params": c.initial, "x": x, "y": np.zeros((BATCH, 3, 3, 3))}
    )
    names = [o.name for o in c.train.graph.output]
    h = ReferenceEvaluator(
        _model(
            [n("Conv", ["x", "W"], ["h"])],
            {"W": c.initial[:24].reshape(3, 2, 2, 2)},
            [2, 4, 4],
            "h",
        )
    ).run(None, {"x": x})[0]
    np.testing.assert_allclose(out[names.index(c.state[0][0])], h.mean(axis=(0, 2, 3)))
    np.testing.assert_allclose(out[names.index(c.state[1][0])], h.var(axis=(0, 2, 3)))


def test_an_op_outside_the_table_is_refused_naming_node_and_op():
    m = _model([n("Mul", ["x", "W"], ["h"]), n("Hardmax", ["h"], ["z"])], {"W": w(4)}, [4], "z")
    with pytest.raises(CompileError) as e:
        compile_model(m, "mse")
    assert (
        str(e.value) == "node z: op Hardmax has no gradient rule (the table: edgegossip model ops)"
    )


def test_every_op_outside_the_table_is_refused_at_once_one_line_each():
    """Issue 55, item 6: a transformer took about six rounds of compile, one refusal a round,
    each repeating the whole table."""
    m = _model(
        [
            n("Mul", ["x", "W"], ["h"]),
            n("Hardmax", ["h"], ["a"]),
            n("Mul", ["a", "V"], ["b"]),
            n("Round", ["b"], ["z"]),
        ],
        {"W": w(4), "V": w(4)},
        [4],
        "z",
    )
    with pytest.raises(CompileError) as e:
        compile_model(m, "mse")
    assert str(e.value).splitlines() == [
        "2 nodes have no gradient rule (the table: edgegossip model ops):",
        "  node a: op Hardmax has no gradient rule",
        "  node z: op Round has no gradient rule",
    ]


def test_model_ops_lists_the_table():
    import json

    from click.testing import CliRunner

    from edgegossip.cli.app import cli
    from edgegossip.compiler.ops import OPS

    res = CliRunner().invoke(cli, ["model", "ops", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["op"] for r in rows] == sorted(OPS) and all(r["cases"] for r in rows)


def test_a_model_below_opset_13_and_a_bad_loss_are_refused():
    m = _model([n("Mul", ["x", "W"], ["z"])], {"W": w(4)}, [4], "z")
    with pytest.raises(CompileError, match="choose cross-entropy or mse"):
        compile_model(m, "hinge")
    m.opset_import[0].version = 11
    with pytest.raises(CompileError, match="opset 11: export with opset 13 or later"):
        compile_model(m, "mse")


def test_onnxruntime_runs_the_float32_training_graph_as_the_reference_does():
    """Stock onnxruntime, float32, against the float64 reference on the same CNN: tolerance
    1e-4 relative, float32's rounding through a dozen ops."""
    import onnxruntime as ort

    def cnn(dtype):
        return _model(
            [
                n("Conv", ["x", "W", "B"], ["h"], pads=[1, 1, 1, 1]),
                n("BatchNormalization", ["h", "g", "b", "rm", "rv"], ["bn"]),
                n("Relu", ["bn"], ["r"]),
                n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                n("Flatten", ["p"], ["f"]),
                n("Gemm", ["f", "L", "c"], ["logits"], transB=1),
            ],
            {
                "W": w(4, 1, 3, 3),
                "B": w(4),
                "g": np.ones(4),
                "b": np.zeros(4),
                "rm": np.zeros(4),
                "rv": np.ones(4),
                "L": w(3, 16),
                "c": w(3),
            },
            [1, 4, 4],
            "logits",
            dtype,
        )

    RNG.bit_generator.state = np.random.default_rng(11).bit_generator.state
    c64 = compile_model(cnn(np.float64), "cross-entropy")
    RNG.bit_generator.state = np.random.default_rng(11).bit_generator.state
    c32 = compile_model(cnn(np.float32), "cross-entropy")
    x = RNG.normal(size=(8, 1, 4, 4))
    y = RNG.integers(0, 3, 8).astype(np.int64)
    want = _run(c64.train, c64.initial, x, y)
    sess = ort.InferenceSession(c32.train.SerializeToString(), providers=["CPUExecutionProvider"])
    loss, grad = sess.run(
        ["loss", "grad"], {"params": c32.initial, "x": x.astype(np.float32), "y": y}
    )
    assert float(loss) == pytest.approx(want[0], rel=1e-5)
    np.testing.assert_allclose(grad, want[1], rtol=1e-4, atol=1e-6)


FIXTURES = Path(__file__).parent / "fixtures" / "onnx"


@pytest.mark.parametrize("name", ["fashion_cnn", "vibration_cnn", "head"])
def test_models_exported_from_pytorch_train_to_pytorchs_gradients(name):
    """Whole models as torch.onnx.export writes them (scripts/make-onnx-fixtures.py: a 2-D CNN
    with BatchNorm, a 1-D CNN with groups and pooling, a head ending in softmax), compiled and
    run in stock onnxruntime in float32: loss and every parameter's gradient equal PyTorch's on
    the same weights and batch, to 1e-4 relative (float32 through a dozen layers)."""
    import onnxruntime as ort

    ref = np.load(FIXTURES / f"{name}.npz")
    c = compile_model(onnx.load(str(FIXTURES / f"{name}.onnx")), "cross-entropy")
    for p in c.params:  # the compiled layout holds the exported weights
        np.testing.assert_array_equal(
            c.initial[p.offset : p.offset + p.size].reshape(p.shape), ref[f"value/{p.name}"]
        )
    assert {p.name for p in c.params} == {k[len("grad/") :] for k in ref if k.startswith("grad/")}
    sess = ort.InferenceSession(c.train.SerializeToString(), providers=["CPUExecutionProvider"])
    loss, grad = sess.run(["loss", "grad"], {"params": c.initial, "x": ref["x"], "y": ref["y"]})
    assert float(loss) == pytest.approx(float(ref["loss"]), rel=1e-5)
    for p in c.params:
        np.testing.assert_allclose(
            grad[p.offset : p.offset + p.size].reshape(p.shape),
            ref[f"grad/{p.name}"],
            rtol=1e-4,
            atol=1e-6,
            err_msg=p.name,
        )


def _constant_of_shape(shape, out: str) -> onnx.NodeProto:
    one = numpy_helper.from_array(np.array([1.0]), "one")
    return helper.make_node("ConstantOfShape", [shape], [out], name=out, value=one)


def test_constant_folding_is_bounded_in_the_memory_it_takes():
    """Issue 54, item 5: a 51 KB model took 1.1-2.1 GB to compile, folding a constant nobody
    used. Only what the output needs is folded, and a folded tensor past the bound is refused
    in one line before it is computed."""
    import resource

    huge = {"shape": np.array([1 << 14, 1 << 14], np.int64)}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    unused = _model(
        [_constant_of_shape("shape", "big"), n("MatMul", ["x", "W"], ["out"])],
        {"W": w(4, 3), **huge},
        [4],
        "out",
    )
    assert compile_model(unused, "mse").initial.size == 12
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 500
    used = _model(
        [
            _constant_of_shape("shape", "big"),
            n("ReduceSum", ["big"], ["s"], keepdims=0),
            n("MatMul", ["x", "W"], ["h"]),
            n("Add", ["h", "s"], ["out"]),
        ],
        {"W": w(4, 3), **huge},
        [4],
        "out",
    )
    with pytest.raises(CompileError, match="node big: folding its constant output") as e:
        compile_model(used, "mse")
    assert "\n" not in str(e.value)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 500


def test_a_custom_op_inside_a_subgraph_is_refused():
    """Issue 54, item 6: the domain check read the top-level nodes only, so a custom op in an
    If branch compiled and failed on every device at the first step."""
    t = helper.np_dtype_to_tensor_dtype(np.dtype(np.float64))
    then = helper.make_graph(
        [helper.make_node("Weird", [], ["t"], name="weird", domain="custom")],
        "then",
        [],
        [helper.make_tensor_value_info("t", t, [3])],
    )
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(np.zeros(3)))],
        "else",
        [],
        [helper.make_tensor_value_info("e", t, [3])],
    )
    branch = helper.make_node("If", ["c"], ["shift"], then_branch=then, else_branch=other)
    model = _model(
        [branch, n("MatMul", ["x", "W"], ["h"]), n("Add", ["h", "shift"], ["out"])],
        {"W": w(4, 3), "c": np.array(True)},
        [4],
        "out",
    )
    model.opset_import.append(helper.make_opsetid("custom", 1))
    with pytest.raises(CompileError, match="node weird: op custom.Weird is not standard ONNX"):
        compile_model(model, "mse")


@pytest.mark.parametrize(
    "dims,data,message",
    [
        ([4, 1 << 38], [], "1099511627776 elements, more than a device model holds"),
        ([4, 3], [1.0] * 5, "declares 12 elements and holds 5"),
    ],
)
def test_a_tensor_that_does_not_hold_what_it_declares_is_refused(dims, data, message):
    """Issue 54, item 7: a tensor declaring 2^40 elements with no data ended in a traceback."""
    model = _model([n("MatMul", ["x", "W"], ["out"])], {}, [4], "out")
    model.graph.initializer.append(
        onnx.TensorProto(name="W", data_type=onnx.TensorProto.DOUBLE, dims=dims, double_data=data)
    )
    with pytest.raises(CompileError, match=message):
        compile_model(model, "mse")


@pytest.mark.parametrize("opset, runtime", [(17, "1.14"), (18, "1.14"), (20, "1.17"), (21, "1.18")])
def test_a_model_is_compiled_at_its_own_opset(opset, runtime, tmp_path):
    """Issue 55, item 1: every model was converted down to opset 18, and the converter cannot
    take Gelu (no earlier version) or the TorchScript exporter's ConstantOfShape there. A model
    now trains at its own opset (an older one raised to 18), the graph stamped with the IR
    version its oldest runtime reads, and the manifest names that runtime."""
    import onnxruntime as ort

    from edgegossip.compiler.write import compile_file

    m = _model(
        [n("Gemm", ["x", "W", "b"], ["z"], transB=1)],
        {"W": w(5, 4), "b": w(5)},
        [4],
        "z",
        dtype=np.float32,
    )
    m.opset_import[0].version = opset
    onnx.save(m, str(tmp_path / "m.onnx"))
    manifest = compile_file(tmp_path / "m.onnx", "mse", tmp_path / "out")
    assert manifest["opset"] == max(opset, 18) and manifest["onnxruntime"] == runtime
    train = onnx.load(str(tmp_path / "out" / "train.onnx"))
    assert train.opset_import[0].version == max(opset, 18)
    sess = ort.InferenceSession(train.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.normal(size=(BATCH, 4)).astype(np.float32)
    y = RNG.normal(size=(BATCH, 5)).astype(np.float32)
    loss, grad = sess.run(
        ["loss", "grad"], {"params": np.load(tmp_path / "out" / "initial.npy"), "x": x, "y": y}
    )
    assert np.isfinite(loss) and grad.shape == (25,)


def test_an_opset_newer_than_the_compiler_takes_is_refused_in_one_line():
    m = _model([n("Gemm", ["x", "W"], ["z"], transB=1)], {"W": w(5, 4)}, [4], "z")
    m.opset_import[0].version = 22
    with pytest.raises(CompileError) as e:
        compile_model(m, "mse")
    assert str(e.value) == (
        "opset 22: the compiler takes opsets up to 21; export with "
        "torch.onnx.export(..., opset_version=21)"
    )


def test_deploy_refuses_a_wheelhouse_whose_onnxruntime_is_older_than_the_models_opset():
    from edgegossip.artifact import OLDEST_RUNTIME
    from edgegossip.fleet.bundle import runtime_problem

    old = {"wheels": ["numpy-2.4.0-cp311-none.whl", "onnxruntime-1.16.3-cp311-none.whl"]}
    new = {"wheels": ["onnxruntime-1.23.2-cp311-none.whl"]}
    assert runtime_problem(old, "1.17") == (
        "its onnxruntime 1.16.3 is older than the 1.17 the compiled model's opset needs"
    )
    assert runtime_problem(new, "1.17") is None
    assert runtime_problem(old, OLDEST_RUNTIME) is None  # an artifact made at opset 18


def test_a_weight_the_compiler_cannot_train_is_refused_not_left_behind():
    """Issue 55, item 3: a weight reaching the loss only through an op with no rule that no
    trained weight feeds (here an Einsum on the input; a recurrent layer over the input is the
    real case) stayed as exported while the rest trained, and the compile said only a smaller
    parameter count. It is refused, named; accepted, it is recorded as left untrained."""
    m = _model(
        [
            n("Einsum", ["x", "W"], ["h"], equation="bi,ij->bj"),
            n("MatMul", ["h", "V"], ["z"]),
        ],
        {"W": w(4, 5), "V": w(5, 3)},
        [4],
        "z",
    )
    with pytest.raises(CompileError) as e:
        compile_model(m, "mse")
    assert str(e.value).startswith(
        "weight W [4, 5] would not be trained: it reaches the loss only through Einsum"
    )
    c = compile_model(m, "mse", Choice(accept_untrained=True))
    assert [p.name for p in c.params] == ["V"] and c.untrained == ["W"]


def test_a_recurrent_op_it_cannot_unroll_is_refused_in_one_line_naming_it():
    """GRU, LSTM and RNN are unrolled over a static number of steps with their default
    activations (compiler/recurrent.py); anything else is one line naming the node."""
    weights = {"W": w(1, 6, 2), "R": w(1, 6, 2)}
    for attrs, x_shape, said in (
        ({"activations": ["Relu", "Tanh"]}, [3, 2], "GRU with activations ['Relu', 'Tanh']"),
        ({"clip": 2.0}, [3, 2], "GRU with clip"),
        ({}, ["steps", 2], "GRU with a sequence of unknown length"),
    ):
        m = _model(
            [n("GRU", ["x", "W", "R"], ["/rnn/GRU"], hidden_size=2, layout=1, **attrs)],
            weights,
            x_shape,
            "/rnn/GRU",
        )
        with pytest.raises(CompileError) as e:
            compile_model(m, "mse")
        assert str(e.value).startswith(f"layer rnn, node /rnn/GRU: {said}"), str(e.value)
        assert "\n" not in str(e.value)


def test_a_value_named_as_the_training_step_names_its_own_is_renamed():
    """An exporter may name a value y, loss or grad: the step's own target and outputs keep
    those names, the model's value is renamed; an input so named is refused."""
    m = _model([n("Mul", ["x", "W"], ["y"]), n("Tanh", ["y"], ["loss"])], {"W": w(4)}, [4], "loss")
    c = _check(m, [4])
    assert c.output_shape == [4]
    m = _model([n("Mul", ["x", "grad"], ["z"])], {"grad": w(4)}, [4], "z")
    with pytest.raises(CompileError, match="the model's 'grad' is a name the training step uses"):
        compile_model(m, "mse")


@pytest.mark.parametrize(
    "split, keepdims, at",
    [(4, 1, [0, 2, -1]), ([3, 9], 1, [1, 0]), (None, 0, [5, -12, 0]), (5, 1, [2])],
)
def test_a_sequence_read_at_constant_positions_computes_what_the_exporter_wrote(
    split, keepdims, at
):
    """torch's default exporter writes `chunk` and `split` as SplitToSequence and SequenceAt
    (the zoo's attention block trains through them); compiled as one Split. onnxruntime runs
    the sequence ops, so it is the reference: a chunk (the last part shorter), given sizes,
    parts of one without their axis, negative positions."""
    import onnxruntime as ort

    from edgegossip.compiler.sequences import plain

    consts = [helper.make_node("Constant", [], [f"k{i}"], value=_i64(k)) for i, k in enumerate(at)]
    inputs = ["x"] if split is None else ["x", "s"]
    if split is not None:
        consts.append(helper.make_node("Constant", [], ["s"], value=_i64(split)))
    nodes = consts + [
        helper.make_node("SplitToSequence", inputs, ["seq"], axis=-1, keepdims=keepdims),
        *[helper.make_node("SequenceAt", ["seq", f"k{i}"], [f"y{i}"]) for i in range(len(at))],
    ]
    out_dims = None if keepdims == 0 and split is None else ["b", 2, None]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", 2, 12])],
        [
            helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, out_dims)
            for i in range(len(at))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    made = plain(model)
    assert {n.op_type for n in made.graph.node} <= {"Constant", "Split", "Squeeze", "Identity"}
    x = np.random.default_rng(0).normal(size=(3, 2, 12)).astype(np.float32)
    run = [ort.InferenceSession(m.SerializeToString()).run(None, {"x": x}) for m in (model, made)]
    for want, got in zip(*run):
        np.testing.assert_array_equal(got, want)


def _i64(v) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(v, np.int64))
