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
        fd = (m.loss_grad(qp, scratch, x, y, np.random.default_rng(5))
              - m.loss_grad(qm, scratch, x, y, np.random.default_rng(5))) / (2 * eps)
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
