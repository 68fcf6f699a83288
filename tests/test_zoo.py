"""Issue 55: the model zoo. Seventeen small models of the kinds people train on a Pi, defined in
PyTorch 2.13 and exported by both of torch's exporters as docs/own-model.md says
(scripts/make-model-zoo.py, the fixtures in tests/fixtures/zoo with the versions that made
them). Every export either compiles whole, its trained parameters PyTorch's trainable ones
and its loss and every gradient PyTorch's on the same weights and batch (float32 in stock
onnxruntime: within 1e-4 relative, 1e-6 absolute), or is refused in one line naming the
user's layer. Which are refused is written here, with why: the list can only shrink."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgegossip.compiler.build import compile_model
from edgegossip.compiler.errors import CompileError

ZOO = Path(__file__).parent / "fixtures" / "zoo"
EXPORTS = sorted(p.stem for p in ZOO.glob("*.onnx"))
# recurrent layers as ONNX's GRU and LSTM ops (both exporters write them): no rule yet
REFUSED: dict[str, str] = {}


def test_the_zoo_is_what_its_script_made():
    made = json.loads((ZOO / "zoo.json").read_text())["models"]
    assert sorted(made) == EXPORTS and len(EXPORTS) >= 34
    assert all(v.endswith("parameters") for v in made.values())  # no exporter refused one


@pytest.mark.parametrize("name", EXPORTS)
def test_every_zoo_model_trains_as_pytorch_does_or_is_refused_naming_its_layer(name):
    import onnxruntime as ort

    ref = np.load(ZOO / f"{name}.npz")
    model = onnx.load(str(ZOO / f"{name}.onnx"))
    loss_kind = str(ref["loss_kind"])  # mse: an autoencoder reconstructing its input
    if name in REFUSED:
        with pytest.raises(CompileError) as e:
            compile_model(model, loss_kind)
        assert str(e.value).startswith(REFUSED[name]) and "\n" not in str(e.value)
        return
    c = compile_model(model, loss_kind)
    trained = {p.name for p in c.params}
    assert trained == {k[len("grad/") :] for k in ref if k.startswith("grad/")}
    assert not [k for k in ref if k.startswith("unmatched/")]
    sess = ort.InferenceSession(c.train.SerializeToString(), providers=["CPUExecutionProvider"])
    loss, grad = sess.run(["loss", "grad"], {"params": c.initial, "x": ref["x"], "y": ref["y"]})
    assert float(loss) == pytest.approx(float(ref["loss"]), rel=1e-5)
    for p in c.params:
        np.testing.assert_array_equal(
            c.initial[p.offset : p.offset + p.size].reshape(p.shape), ref[f"value/{p.name}"]
        )
        np.testing.assert_allclose(
            grad[p.offset : p.offset + p.size].reshape(p.shape),
            ref[f"grad/{p.name}"],
            rtol=1e-4,
            atol=1e-6,
            err_msg=p.name,
        )


def test_external_data_and_shared_weights_go_through_compile_and_back(tmp_path):
    """Issue 55, item 4: the dynamo exporter's default writes the weights to NAME.onnx.data,
    which the compiled folder's model.onnx did not carry, so `export` and `fleet collect` could
    not write a model back. And a TorchScript export's shared weights are trained one by one:
    writing them back needs each under its own name. The artifact's model.onnx is now one
    file holding every trained weight by name, and what is written back runs in onnxruntime."""
    import onnxruntime as ort

    from edgegossip.compiler.write import compile_file
    from edgegossip.models.compiled import CompiledModel
    from edgegossip.models.writeback import write

    source = onnx.load(str(ZOO / "ds_cnn-torchscript.onnx"))
    onnx.save(  # as the dynamo exporter writes it by default
        source,
        str(tmp_path / "net.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="net.onnx.data",
        size_threshold=0,
    )
    assert (tmp_path / "net.onnx.data").stat().st_size > 4 * 1000
    compile_file(tmp_path / "net.onnx", "cross-entropy", tmp_path / "net")
    (tmp_path / "net.onnx.data").unlink()  # the artifact needs nothing beside the source
    model = CompiledModel(tmp_path / "net")
    params = model.init(0) + 0.25
    out = write(model, params, tmp_path / "trained.onnx", {})
    trained = onnx.load(str(out))
    values = {i.name: onnx.numpy_helper.to_array(i) for i in trained.graph.initializer}
    for name, view in model.layout.views(params).items():
        np.testing.assert_array_equal(values[name], view.reshape(values[name].shape))
    ref = np.load(ZOO / "ds_cnn-torchscript.npz")
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {"x": ref["x"]})
    assert logits.shape == (8, 6) and np.isfinite(logits).all()
