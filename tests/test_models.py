import numpy as np
import pytest

from edgegossip.models import make_model
from edgegossip.models.mlp import MLP
from edgegossip.models.optim import NesterovSGD


def test_seed_mlp_size_and_views():
    m = make_model("mlp")
    assert m.n_params == 2_913_290
    p = m.init()
    v = m.layout.views(p)
    v["b3"][...] = 7
    assert p[-10:].tolist() == [7] * 10  # the layer is a view into the flat vector
    assert abs(float(v["W0"].std()) - np.sqrt(2 / 784)) < 0.002  # Kaiming normal


@pytest.mark.parametrize("dropout", [(0.0, 0.0), (0.2, 0.5)])
def test_mlp_gradient_matches_finite_differences(dropout):
    m = MLP([5, 7, 6, 3], *dropout, seed=1)
    q = m.init()
    # non-zero biases: an exactly-zero pre-activation is a ReLU kink finite differences cannot see
    for name, view in m.layout.views(q).items():
        if name.startswith("b"):
            view[...] = np.random.default_rng(2).uniform(0.1, 0.3, view.shape)
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    y = np.array([0, 1, 2, 1])
    g = np.zeros_like(q)
    m.loss_grad(q, g, x, y, np.random.default_rng(5))
    eps, scratch = 1e-3, np.zeros_like(q)
    for k in range(q.size):
        qp, qm = q.copy(), q.copy()
        qp[k] += eps
        qm[k] -= eps
        fd = (
            m.loss_grad(qp, scratch, x, y, np.random.default_rng(5))
            - m.loss_grad(qm, scratch, x, y, np.random.default_rng(5))
        ) / (2 * eps)
        assert abs(fd - g[k]) < 2e-3, (k, fd, g[k])


def test_logreg_learns_separable_data():
    m = make_model("logreg")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 784)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    p, g = m.init(), np.zeros(m.n_params, np.float32)
    opt = NesterovSGD(m.n_params, lr=0.05, momentum=0.9)
    for _ in range(60):
        m.loss_grad(p, g, x, y, None)
        opt.step(p, g)
    assert m.accuracy(p, x, y) > 0.95


def test_cnn_gradient_matches_finite_differences():
    from edgegossip.models.cnn import CNN

    m = CNN(channels=(2, 3), seed=0)
    q = m.init()
    v = m.layout.views(q)
    for name in ("k0", "k1", "b"):
        v[name][...] = np.random.default_rng(1).uniform(0.05, 0.2, v[name].shape)
    x = np.random.default_rng(0).standard_normal((2, 784)).astype(np.float32)
    y = np.array([3, 7])
    g = np.zeros_like(q)
    m.loss_grad(q, g, x, y, None)
    rng = np.random.default_rng(4)
    eps, scratch = 1e-3, np.zeros_like(q)
    bad = []
    for k in rng.choice(q.size, 150, replace=False):
        qp, qm = q.copy(), q.copy()
        qp[k] += eps
        qm[k] -= eps
        fd = (m.loss_grad(qp, scratch, x, y, None) - m.loss_grad(qm, scratch, x, y, None)) / (
            2 * eps
        )
        if abs(fd - g[k]) > 2e-3 + 0.02 * abs(fd):
            bad.append((int(k), fd, float(g[k])))
    # a max-pool arg-max or a ReLU may flip inside +-eps for a handful of coordinates
    assert len(bad) <= 3, bad


def test_cnn_shapes_and_size():
    m = make_model("cnn")
    assert m.n_params == 11_274
    p = m.init()
    assert m.logits(p, np.zeros((3, 784), np.float32)).shape == (3, 10)


@pytest.mark.parametrize("sizes", [[784, 1024, 1024, 1024, 10], [784, 10]])
def test_layer_by_layer_step_equals_the_whole_model_step(sizes):
    """The fused update (a block of one layer's gradient at a time) lands exactly where a whole
    step does. Exact by construction, on any CPU: both paths run the same BLAS products on the
    same shapes (the row blocks), and the optimiser's update is elementwise."""
    from edgegossip.models import mlp
    from edgegossip.models.optim import NesterovSGD

    m = mlp.MLP(sizes, 0.2, 0.5, seed=3)
    rng = np.random.default_rng(0)
    xb = rng.random((32, 784), dtype=np.float32)
    yb = rng.integers(0, 10, 32)
    x1, x2 = m.init(3), m.init(3)
    o1, o2 = NesterovSGD(m.n_params, 0.01, 0.9), NesterovSGD(m.n_params, 0.01, 0.9)
    g = np.zeros(m.n_params, np.float32)
    scratch = np.zeros(m.max_layer_params(), np.float32)
    for step in range(3):
        l1 = m.loss_grad(x1, g, xb, yb, np.random.default_rng(step))
        o1.step(x1, g)
        l2 = m.loss_grad(
            x2,
            scratch,
            xb,
            yb,
            np.random.default_rng(step),
            apply=lambda lo, hi, gs: o2.step_slice(x2, gs, lo, hi),
        )
        assert l1 == l2
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(o1.v, o2.v)
    assert scratch.size <= mlp.GRAD_BLOCK_FLOATS  # a block of rows, not a layer
