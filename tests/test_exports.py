"""Issue 55, item 3: what torch's exporters change of a model, said in one line with the setting
that keeps it; and a model exported in train mode (which keeps Dropout and BatchNorm) written
back by `fleet collect` as a model for inference. The fixtures are one Conv-BN-ReLU-Dropout-
Linear model as four exports write it (scripts/make-onnx-fixtures.py, torch 2.13)."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.reference import ReferenceEvaluator

from edgegossip.compiler.build import compile_model
from edgegossip.compiler.write import compile_file
from edgegossip.models import writeback
from edgegossip.models.compiled import CompiledModel

EXPORTS = Path(__file__).parent / "fixtures" / "exports"


@pytest.mark.parametrize(
    "export, said",
    [
        ("eval-dynamo", "layer drop (Dropout), node node_clone: exported in eval mode"),
        ("optimized-dynamo", "layer bn (BatchNorm2d), node node_Conv_13: the exporter folded"),
        ("folded-torchscript", "weights onnx::Conv_16, onnx::Conv_17 were computed by the"),
        ("train-dynamo", None),
    ],
)
def test_what_the_exporter_changed_is_said_with_the_setting_that_keeps_it(export, said):
    c = compile_model(onnx.load(str(EXPORTS / f"{export}.onnx")), "cross-entropy")
    if said is None:  # train mode, optimize=False: Dropout and BatchNorm both kept, and trained
        assert c.exporter_changes == []
        assert {"Dropout", "BatchNormalization"} <= set(c.ops)
        return
    (line,) = c.exporter_changes
    assert line.startswith(said) and "\n" not in line
    keep = {"eval": "train mode", "optimized": "optimize=False", "folded": "do_constant_folding"}
    assert keep[export.split("-")[0]] in line


def test_a_train_mode_export_is_written_back_for_inference(tmp_path):
    """The same weights and statistics written into the train-mode and the eval-mode export:
    the train-mode one then runs as the eval-mode one does (no dropout, BatchNorm on its
    running statistics), the same output twice, in onnx's reference evaluator, which honours
    training_mode as the spec has it (onnxruntime's inference session drops Dropout and runs
    BatchNorm on its statistics whatever the graph says)."""
    outs = {}
    x = np.random.default_rng(0).normal(size=(16, 1, 8, 8)).astype(np.float32)
    for export in ("train-dynamo", "eval-dynamo"):
        compile_file(EXPORTS / f"{export}.onnx", "cross-entropy", tmp_path / export)
        model = CompiledModel(tmp_path / export)
        params = model.init(0) + 0.1
        running = writeback.running_statistics(model, params, [(x, np.zeros(16, np.int64))])
        path = writeback.write(model, params, tmp_path / f"{export}.onnx", running)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        spec = ReferenceEvaluator(str(path))
        outs[export] = [spec.run(None, {"x": x})[0] for _ in range(2)] + [
            sess.run(None, {"x": x})[0]
        ]
    np.testing.assert_array_equal(outs["train-dynamo"][0], outs["train-dynamo"][1])
    np.testing.assert_allclose(outs["train-dynamo"][0], outs["eval-dynamo"][0], rtol=1e-5)
    np.testing.assert_allclose(outs["train-dynamo"][2], outs["eval-dynamo"][0], rtol=1e-5)


@pytest.mark.parametrize("export", ["static-dynamo", "static-torchscript"])
def test_an_export_with_a_fixed_batch_trains_on_any_batch(export, tmp_path):
    """torch.onnx.export's default fixes the example's batch (2 here) in the input and in the
    views' shapes (dynamo: a Reshape to a Concat of Constants [2, 144]): compiled, it takes a
    device's batch of 32, computing what the export with a dynamic batch computes."""
    outs = {}
    x = np.random.default_rng(1).normal(size=(32, 1, 8, 8)).astype(np.float32)
    for name in (export, "train-dynamo"):
        compile_file(EXPORTS / f"{name}.onnx", "cross-entropy", tmp_path / name)
        model = CompiledModel(tmp_path / name)
        grad = np.zeros(model.n_params, np.float32)
        assert np.isfinite(model.loss_grad(model.init(0), grad, x, np.zeros(32, np.int64), None))
        outs[name] = model.logits(model.init(0), x)
    np.testing.assert_allclose(outs[export], outs["train-dynamo"], rtol=1e-5, atol=1e-6)


def test_a_model_that_mixes_its_fixed_batch_is_refused_in_one_line():
    """A model that centres its batch (x - x.mean(0)), exported with the batch fixed: made to
    take any batch it would compute something else, so it is refused, saying how to export."""
    from edgegossip.compiler.errors import CompileError

    with pytest.raises(CompileError) as e:
        compile_model(onnx.load(str(EXPORTS / "mixing-static-dynamo.onnx")), "mse")
    assert str(e.value).startswith("input 'x' has a fixed batch of 2")
    assert "dynamic_shapes" in str(e.value) and "\n" not in str(e.value)
