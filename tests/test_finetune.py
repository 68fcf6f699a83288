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
