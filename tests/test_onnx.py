"""ONNX: the exported file loads in stock onnxruntime and predicts as NumPy does; the gradient
graph follows the NumPy backend step for step from the same start."""
import numpy as np
import onnx
import pytest

from edgegossip.models import make_model
from edgegossip.models.onnx_backend import OnnxTrainer, export, predict, softmax
from edgegossip.models.optim import NesterovSGD


@pytest.mark.parametrize("name", ["logreg", "mlp"])
def test_export_predictions_match_numpy(tmp_path, mnist_data, name):
    m = make_model(name)
    params = m.init(3)
    params += np.random.default_rng(0).standard_normal(m.n_params, dtype=np.float32) * 0.01
    path = export(m, params, tmp_path / "m.onnx")
    onnx.checker.check_model(onnx.load(str(path)))
    got = predict(path, mnist_data.x_test)
    ref = softmax(m.logits(params, mnist_data.x_test))
    assert np.abs(got - ref).max() <= 1e-5
    assert (got.argmax(1) == ref.argmax(1)).all()


@pytest.mark.parametrize("name,rtol", [("logreg", 1e-4), ("mlp", 0.05)])
def test_onnx_training_follows_numpy(mnist_data, name, rtol):
    """100 steps, same batches and dropout masks. The MLP's losses drift apart slowly (momentum
    0.99 amplifies float32 summation-order differences), hence its looser tolerance."""
    m = make_model(name)
    p_np, p_ox = m.init(), m.init()
    g = np.zeros_like(p_np)
    opt = NesterovSGD(m.n_params)
    g_ox = np.zeros_like(p_ox)
    opt_ox = NesterovSGD(m.n_params)
    trainer = OnnxTrainer(m)
    r_np, r_ox, batches = np.random.default_rng(1), np.random.default_rng(1), np.random.default_rng(2)
    l_np, l_ox = [], []
    for _ in range(100):
        idx = batches.integers(0, len(mnist_data.y_train), 32)
        x, y = mnist_data.batch(idx)
        l_np.append(m.loss_grad(p_np, g, x, y, r_np))
        opt.step(p_np, g)
        l_ox.append(trainer.loss_grad(p_ox, g_ox, x, y, r_ox))
        opt_ox.step(p_ox, g_ox)
    np.testing.assert_allclose(l_ox, l_np, rtol=rtol, atol=rtol)
    assert l_np[-1] < l_np[0] * 0.5  # it did learn
