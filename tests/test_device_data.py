"""A device's own data: the [data] table, the file formats, `data split`, and the one-line
errors for data that does not fit the model."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from edgegossip import config
from edgegossip.cli.app import cli
from edgegossip.config import AgentConfig
from edgegossip.data import device
from edgegossip.metrics import read


def test_mnist_source_holds_only_the_shard_and_the_eval_slice(mnist_data):
    d = device.from_mnist(me=1, workers=4, partition="iid", seed=0, eval_examples=500)
    assert d.x.shape == (51_200 // 4, 784) and d.x.dtype == np.uint8
    assert d.x_eval.shape == (500, 784) and d.x_eval.dtype == np.uint8
    full = mnist_data  # the same examples the whole-set loader gives for that shard
    from edgegossip.data import partition

    idx = partition.iid(len(full.y_train), 4, 0)[1]
    np.testing.assert_array_equal(d.x, full.x_train[idx])
    np.testing.assert_array_equal(device.ready(d.x_eval), full.x_val[:500])


def test_an_agent_cuts_its_shard_by_the_fleets_partition_and_its_parameters(mnist_data):
    """Issue 57, item 1: beta and classes_per_worker are the fleet's settings, as simulate and
    `data split` take them; an agent once cut Dirichlet shards at 0.5 and class shards at 2
    whatever the run said."""
    from edgegossip.data import partition

    labels = mnist_data.y_train
    for kind, kw, want in (
        ("dirichlet", {"beta": 0.1}, partition.dirichlet(labels, 8, 0.1, 3)[5]),
        ("classes", {"k": 3}, partition.classes(labels, 8, 3, 3)[5]),
    ):
        d = device.from_mnist(5, 8, kind, 3, 10, **kw)
        np.testing.assert_array_equal(d.y, labels[want])
    assert len(np.unique(device.from_mnist(5, 8, "classes", 3, 10, k=3).y)) == 3
    cfg = AgentConfig(
        id=0, listen="127.0.0.1:1", algorithm="local", partition="dirichlet", beta=0.1
    )
    assert "beta = 0.1" in config.to_toml(cfg)
    assert "beta" not in config.to_toml(
        AgentConfig(id=0, listen="127.0.0.1:1", algorithm="local", beta=0.1)
    )


def test_npz_and_csv_files(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((50, 6), dtype=np.float32), rng.integers(0, 3, 50)
    np.savez(tmp_path / "a.npz", x=x, y=y, x_eval=x[:5], y_eval=y[:5])
    d = device.from_file(tmp_path / "a.npz")
    np.testing.assert_array_equal(d.x, x) and np.testing.assert_array_equal(d.y_eval, y[:5])
    device.check(d, 6, 3)
    with pytest.raises(device.DataMismatch, match="6 features; the model takes 784"):
        device.check(d, 784, 10)
    with pytest.raises(device.DataMismatch, match="label 2 found"):
        device.check(d, 6, 2)
    rows = ["t,h,label,p"] + [f"{a},{b},{c},{e}" for (a, b, e), c in zip(x[:, :3], y)]
    (tmp_path / "s.csv").write_text("\n".join(rows) + "\n")
    c = device.from_file(tmp_path / "s.csv", eval_fraction=0.2)
    assert c.x.shape == (40, 3) and c.x_eval.shape == (10, 3)
    assert sorted(np.concatenate([c.y, c.y_eval]).tolist()) == sorted(y.tolist())
    bare = [f"{a},{b},{e},{c}" for (a, b, e), c in zip(x[:, :3], y)]  # no header: label last
    (tmp_path / "bare.csv").write_text("\n".join(bare) + "\n")
    c2 = device.from_file(tmp_path / "bare.csv", eval_fraction=0.2, label_column="-1")
    assert c2.x.shape == (40, 3)
    assert sorted(np.concatenate([c2.y, c2.y_eval]).tolist()) == sorted(y.tolist())
    with pytest.raises(device.DataMismatch, match="whole numbers"):
        device.from_file(tmp_path / "s.csv", label_column="t")  # a column of real numbers
    (tmp_path / "bad.csv").write_text("1,2,3\n3,x,5\n")
    with pytest.raises(device.DataMismatch, match="not a number"):
        device.from_file(tmp_path / "bad.csv")
    np.savez(tmp_path / "noy.npz", x=x)
    with pytest.raises(device.DataMismatch, match="needs arrays x and y"):
        device.from_file(tmp_path / "noy.npz")


def _agent(tmp_path, **kw):
    cfg = AgentConfig(
        id=0,
        listen="127.0.0.1:1",
        workers=1,
        algorithm="local",
        model="logreg",
        output=str(tmp_path / "out"),
        eval_every=100,
        **kw,
    )
    path = tmp_path / "agent.toml"
    path.write_text(config.to_toml(cfg))
    return subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "agent", "--config", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def test_split_then_an_agent_trains_on_its_own_file_only(tmp_path, mnist_data):
    def split(partition):
        res = CliRunner().invoke(
            cli,
            [
                "data",
                "split",
                "mnist",
                "--workers",
                "4",
                "--partition",
                partition,
                "--out",
                str(tmp_path / partition),
                "--json",
            ],
        )
        assert res.exit_code == 0, res.output
        return json.loads(res.output.strip().splitlines()[-1])["devices"]

    rows = split("classes")
    assert [r["device"] for r in rows] == [0, 1, 2, 3]
    assert all(r["classes"] == 2 for r in rows) and sum(r["eval"] for r in rows) == 8_800
    rows = split("iid")
    p = _agent(tmp_path, source="file", path=rows[2]["path"], max_steps=300)
    assert p.returncode == 0, p.stderr
    final = json.loads(p.stdout)
    assert final["step"] == 300
    with np.load(rows[2]["path"]) as z:
        assert set(z.files) == {"x", "y", "x_eval", "y_eval"} and len(z["y"]) == rows[2]["train"]
    recs = read(tmp_path / "out" / "metrics.jsonl")
    assert recs[-1]["accuracy"] > 0.8


def test_data_that_does_not_fit_the_model_is_one_line(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((20, 12), np.float32), y=np.zeros(20, np.int64))
    p = _agent(tmp_path, source="file", path=str(tmp_path / "d.npz"), max_steps=10)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "12 features" in p.stderr
    p = _agent(tmp_path, source="file", path=str(tmp_path / "d.npz"), max_steps=10, inputs=12)
    assert p.returncode == 0, p.stderr  # a 12-feature logistic regression trains on it
    p = _agent(tmp_path, source="file", path=str(tmp_path / "none.npz"), max_steps=10)
    assert p.returncode == 4 and "does not exist" in p.stderr


def test_packed_rows_give_back_exactly_the_rows_they_hold(mnist_data):
    from edgegossip.data.packed import PackedRows

    rows = mnist_data.x_train[:3000]
    assert rows.dtype == np.uint8
    packed = PackedRows.pack(rows)
    assert packed.shape == rows.shape and len(packed) == 3000
    # MNIST is mostly 0: what the shard takes in memory, held this way (measured ~3.8x smaller)
    assert packed.nbytes < rows.nbytes / 3
    pick = np.random.default_rng(0).permutation(3000)[:64]
    np.testing.assert_array_equal(packed[pick], rows[pick])
    np.testing.assert_array_equal(packed[10:20], rows[10:20])
    np.testing.assert_array_equal(packed[np.array([-1, 0])], rows[[-1, 0]])
    np.testing.assert_array_equal(np.asarray(packed), rows)
    assert packed[np.array([], np.int64)].shape == (0, 784)
    with pytest.raises(IndexError):
        packed[np.array([3000])]
    with pytest.raises(ValueError):
        PackedRows.pack(rows.astype(np.float32))


def test_a_model_with_a_light_step_keeps_its_shard_plain(mnist_data):
    from edgegossip.data.packed import PackedRows
    from edgegossip.models import make_model

    assert make_model("logreg").light_step and not make_model("mlp").light_step
    assert not make_model("cnn").light_step  # a slow step: packing costs it nothing that shows
    packed = device.from_mnist(me=0, workers=4, partition="iid", seed=0, eval_examples=100)
    plain = device.from_mnist(0, 4, "iid", 0, 100, packed=False)
    assert isinstance(packed.x, PackedRows) and isinstance(plain.x, np.ndarray)
    np.testing.assert_array_equal(np.asarray(packed.x), plain.x)
    np.testing.assert_array_equal(np.asarray(packed.x_eval), plain.x_eval)


def test_a_split_file_is_read_deflated_when_packed(tmp_path):
    """A file as `data split` writes it (2-D uint8 x and x_eval): packed, both are PackedRows
    read a block at a time, row for row what the plain read gives; a file of another layout
    (3-D x, no x_eval) is read plain either way."""
    from edgegossip.data.packed import PackedRows

    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (5000, 784), dtype=np.uint8)
    x_eval = rng.integers(0, 256, (300, 784), dtype=np.uint8)
    y, y_eval = rng.integers(0, 10, 5000), rng.integers(0, 10, 300)
    np.savez(tmp_path / "a.npz", x=x, y=y, x_eval=x_eval, y_eval=y_eval)
    plain = device.from_file(tmp_path / "a.npz")
    small = device.from_file(tmp_path / "a.npz", packed=True)
    assert isinstance(small.x, PackedRows) and isinstance(small.x_eval, PackedRows)
    np.testing.assert_array_equal(np.asarray(small.x), plain.x)
    np.testing.assert_array_equal(np.asarray(small.x_eval), plain.x_eval)
    np.testing.assert_array_equal(small.y, plain.y)
    np.savez(tmp_path / "b.npz", x=x.reshape(-1, 28, 28), y=y)
    other = device.from_file(tmp_path / "b.npz", packed=True)
    assert isinstance(other.x, np.ndarray) and other.row_shape == (28, 28)
