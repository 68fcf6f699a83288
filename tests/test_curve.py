"""`emulate --curve`: the fleet's average model sampled from the agents' checkpoints while it
runs (report/average.py), each sample scored after the run, and the time to an accuracy read
from them."""

import numpy as np
from click.testing import CliRunner

from edgegossip import checkpoint
from edgegossip.cli.app import cli
from edgegossip.models import make_model
from edgegossip.report import average


def _trained(model, x, y, steps: int, seed: int) -> np.ndarray:
    """logreg after a few plain gradient steps: models that differ and score differently."""
    params, grad = model.init(seed), np.zeros(model.n_params, np.float32)
    for k in range(steps):
        batch = slice(64 * k, 64 * (k + 1))
        model.loss_grad(params, grad, x[batch], y[batch], None)
        params -= 0.5 * grad
    return params


def test_samples_average_the_checkpoints_written_so_far(tmp_path, mnist_data):
    model = make_model("logreg")
    x, y = mnist_data.x_test[:2000], mnist_data.y_test[:2000]
    first = _trained(model, mnist_data.x_train, mnist_data.y_train, 2, seed=0)
    second = _trained(model, mnist_data.x_train[5000:], mnist_data.y_train[5000:], 40, seed=1)
    sampler = average.CurveSampler(tmp_path, agents=3)
    sampler.sample(0.5)  # no agent has written one yet: no sample
    checkpoint.save(tmp_path / "agent0", params=first)
    sampler.sample(1.0)
    checkpoint.save(tmp_path / "agent1", params=second)
    (tmp_path / "agent2").mkdir()
    (tmp_path / "agent2" / checkpoint.NAME).write_bytes(b"PK\x03\x04 torn")  # mid-write
    sampler.sample(2.0)

    rows = average.scored(tmp_path, model, x, y)
    assert [(r["time_s"], r["devices"]) for r in rows] == [(1.0, 1), (2.0, 2)]
    both = average.average([first, second])
    assert rows[0]["accuracy"] == model.evaluate(first, x, y)["accuracy"]
    assert rows[1]["accuracy"] == model.evaluate(both, x, y)["accuracy"]
    assert rows[0]["accuracy"] < rows[1]["accuracy"], rows
    assert average.time_to(rows, rows[1]["accuracy"]) == 2.0
    assert average.time_to(rows, rows[0]["accuracy"]) == 1.0
    assert average.time_to(rows, 1.01) is None


def test_a_curve_needs_checkpoints_more_often_than_the_run_lasts(tmp_path):
    res = CliRunner().invoke(
        cli,
        ["emulate", "--backend", "loopback", "--duration", "30", "--curve", "--out", str(tmp_path)],
    )
    assert res.exit_code == 2, res.output
    assert "--curve samples at every --checkpoint-every-s" in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
