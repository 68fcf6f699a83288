"""ONNX: the exported file loads in stock onnxruntime and predicts as NumPy does; the gradient
graph follows the NumPy backend step for step from the same start."""

import numpy as np
import onnx
import pytest

from edgegossip.models import make_model
from edgegossip.models.mlp import MLP
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


@pytest.mark.parametrize("sizes", [[784, 10], [784, 64, 32, 10]])
def test_onnx_training_follows_numpy(mnist_data, sizes):
    """The onnx backend is the MLP's graph through the compiler; without dropout it follows
    the NumPy backend from the same start, 100 steps on the same batches. The two compute the
    same math in different summation orders (onnxruntime's and OpenBLAS's kernels, chosen per
    CPU), so they agree to float32 rounding, not bit for bit: the first gradient within 1e-5 of
    its norm and the first 20 losses within 1e-4; later the trajectories may part (momentum
    0.99 amplifies rounding), so for the whole run both must learn."""
    m = MLP(sizes, dropout_in=0.0, dropout_hidden=0.0)
    p_np, p_ox = m.init(), m.init()
    g, g_ox = np.zeros_like(p_np), np.zeros_like(p_ox)
    opt, opt_ox = NesterovSGD(m.n_params), NesterovSGD(m.n_params)
    trainer = OnnxTrainer(m)
    batches = np.random.default_rng(2)
    l_np, l_ox = [], []
    for step in range(100):
        x, y = mnist_data.batch(batches.integers(0, len(mnist_data.y_train), 32))
        l_np.append(m.loss_grad(p_np, g, x, y, None))
        l_ox.append(trainer.loss_grad(p_ox, g_ox, x, y, None))
        if step == 0:
            assert np.linalg.norm(g - g_ox) <= 1e-5 * np.linalg.norm(g)
        opt.step(p_np, g)
        opt_ox.step(p_ox, g_ox)
    np.testing.assert_allclose(l_ox[:20], l_np[:20], rtol=1e-4)
    assert l_np[-1] < l_np[0] * 0.5 and l_ox[-1] < l_ox[0] * 0.5  # both did learn


def test_the_seed_mlp_trains_with_dropout_in_onnxruntime(mnist_data):
    """The seed MLP's dropout (0.2 on the input, 0.5 after each hidden layer) is the compiled
    Dropout's: its masks are drawn in onnxruntime, so the gradient of one batch differs from
    step to step, and the mean over many steps is the NumPy backend's mean (both draw masks of
    the same rates); and it learns."""
    m = make_model("mlp")
    trainer = OnnxTrainer(m)
    p = m.init()
    x, y = mnist_data.batch(np.arange(64))
    g1, g2 = np.zeros_like(p), np.zeros_like(p)
    trainer.loss_grad(p, g1, x, y, None)
    trainer.loss_grad(p, g2, x, y, None)
    assert not np.array_equal(g1, g2)  # fresh masks every step
    ox = np.mean([trainer.loss_grad(p, g1, x, y, None) for _ in range(40)])
    rng = np.random.default_rng(0)
    ref = np.mean([m.loss_grad(p, g2, x, y, rng) for _ in range(40)])
    assert ox == pytest.approx(ref, rel=0.05)  # 40 draws: the means' spread is about 1%
    opt = NesterovSGD(m.n_params)
    first = trainer.loss_grad(p, g1, x, y, None)
    for step in range(60):
        xb, yb = mnist_data.batch(np.arange(step * 32, step * 32 + 32) % 6000)
        trainer.loss_grad(p, g1, xb, yb, None)
        opt.step(p, g1)
    assert trainer.loss_grad(p, g1, x, y, None) < first * 0.7
