"""Issue 56, item 1: fine-tuning a pretrained model. `model compile --freeze 'backbone.*'` on a
backbone-and-head model exported by both of torch's exporters (scripts/make-model-zoo.py,
tests/fixtures/finetune): it trains the head alone, the frozen backbone's BatchNorm
normalising with its running statistics, as PyTorch's eval() does; loss and gradients are
PyTorch's with the backbone in eval mode and only the head trainable; and the training graph
computes no gradient for the backbone (no transposed convolution, fewer nodes)."""

from pathlib import Path

import numpy as np
import onnx
import pytest

from edgegossip.compiler.build import Choice, compile_model
from edgegossip.compiler.errors import CompileError

FIXTURES = Path(__file__).parent / "fixtures" / "finetune"


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_freezing_the_backbone_trains_the_head_as_pytorch_does(exporter):
    import onnxruntime as ort

    model = onnx.load(str(FIXTURES / f"finetune-{exporter}.onnx"))
    ref = np.load(FIXTURES / f"finetune-{exporter}.npz")
    whole = compile_model(model, "cross-entropy")
    for choice in (Choice(freeze=("backbone.*",)), Choice(train=("head.*",))):
        c = compile_model(model, "cross-entropy", choice)
        assert [p.name for p in c.params] == ["head.weight", "head.bias"]
        assert c.state == [] and all(n.startswith("backbone.") for n in c.frozen)
        ops = [n.op_type for n in c.train.graph.node]
        assert "ConvTranspose" not in ops and len(ops) < len(whole.train.graph.node)
        sess = ort.InferenceSession(c.train.SerializeToString(), providers=["CPUExecutionProvider"])
        loss, grad = sess.run(["loss", "grad"], {"params": c.initial, "x": ref["x"], "y": ref["y"]})
        assert float(loss) == pytest.approx(float(ref["loss"]), rel=1e-5)
        for p in c.params:
            np.testing.assert_allclose(
                grad[p.offset : p.offset + p.size].reshape(p.shape),
                ref[f"grad/{p.name}"],
                rtol=1e-4,
                atol=1e-6,
            )


def test_a_glob_that_matches_nothing_and_freezing_everything_are_refused():
    model = onnx.load(str(FIXTURES / "finetune-dynamo.onnx"))
    with pytest.raises(CompileError, match=r"'encoder\.\*' matches no weight of the model"):
        compile_model(model, "cross-entropy", Choice(freeze=("encoder.*",)))
    with pytest.raises(CompileError, match="every weight is frozen: nothing would train"):
        compile_model(model, "cross-entropy", Choice(freeze=("*",)))


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_frozen_prefix_is_computed_once_and_trains_as_the_whole_graph(exporter, tmp_path):
    """Item 3: the backbone frozen and nothing random before the head, a device computes the
    backbone's output once per example (features.onnx) and trains the head on it
    (train-cached.onnx): PyTorch's loss and gradients as the whole graph gives them."""
    from edgegossip.agent.shard import after_prefix
    from edgegossip.compiler.write import compile_file
    from edgegossip.data.device import DeviceData
    from edgegossip.models.compiled import CompiledModel

    ref = np.load(FIXTURES / f"finetune-{exporter}.npz")
    choice = Choice(freeze=("backbone.*",))
    manifest = compile_file(
        FIXTURES / f"finetune-{exporter}.onnx", "cross-entropy", tmp_path, choice
    )
    assert manifest["prefix"]["shape"] == [16]
    assert {"features.onnx", "train-cached.onnx"} <= set(manifest["files"])
    model = CompiledModel(tmp_path)
    x, y = ref["x"].reshape(len(ref["x"]), -1), ref["y"]
    data = after_prefix(model, DeviceData(x, y, x[:2], y[:2]))
    assert model.on_prefix and data.x.shape == (len(x), 16)
    grad = np.zeros(model.n_params, np.float32)
    loss = model.loss_grad(model.init(0), grad, *data.batch(np.arange(len(y))), None)
    assert loss == pytest.approx(float(ref["loss"]), rel=1e-5)
    for name, g in model.layout.views(grad).items():
        np.testing.assert_allclose(g, ref[f"grad/{name}"], rtol=1e-4, atol=1e-6, err_msg=name)


def test_no_prefix_is_cached_where_something_random_precedes_what_trains():
    """Dropout between the frozen layers and the head: the head's input differs every step,
    so there is nothing to compute once; exported in eval mode (no Dropout) there is."""
    exports = Path(__file__).parent / "fixtures" / "exports"
    train_mode = onnx.load(str(exports / "train-dynamo.onnx"))
    eval_mode = onnx.load(str(exports / "eval-dynamo.onnx"))
    head = Choice(train=("head.*",))
    assert compile_model(train_mode, "cross-entropy", head).prefix is None
    assert compile_model(eval_mode, "cross-entropy", head).prefix is not None
    assert compile_model(eval_mode, "cross-entropy").prefix is None  # nothing frozen
