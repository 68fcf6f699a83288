"""Issue 55: the model zoo. Eleven small models of the kinds people train on a Pi, defined in
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
REFUSED = {
    "gru-dynamo": "layer rnn (GRU), node node_gru__1: op GRU has no gradient rule",
    "gru-torchscript": "layer rnn, node /rnn/GRU: op GRU has no gradient rule",
    "lstm-dynamo": "layer rnn (LSTM), node node_lstm__2: op LSTM has no gradient rule",
    "lstm-torchscript": "layer rnn, node /rnn/LSTM: op LSTM has no gradient rule",
}


def test_the_zoo_is_what_its_script_made():
    made = json.loads((ZOO / "zoo.json").read_text())["models"]
    assert sorted(made) == EXPORTS and len(EXPORTS) >= 22
    assert all(v.endswith("parameters") for v in made.values())  # no exporter refused one


@pytest.mark.parametrize("name", EXPORTS)
def test_every_zoo_model_trains_as_pytorch_does_or_is_refused_naming_its_layer(name):
    import onnxruntime as ort

    ref = np.load(ZOO / f"{name}.npz")
    model = onnx.load(str(ZOO / f"{name}.onnx"))
    if name in REFUSED:
        with pytest.raises(CompileError) as e:
            compile_model(model, "cross-entropy")
        assert str(e.value).startswith(REFUSED[name]) and "\n" not in str(e.value)
        return
    c = compile_model(model, "cross-entropy")
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
