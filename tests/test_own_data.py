"""Issue 55, item 5: `emulate --data` takes the user's own data, a .npz cut across the nodes or a
folder of one .npz per node, and scores the average model on the file's test arrays (else the
nodes' held-out rows). The model is the zoo's transformer encoder as torch's default exporter
wrote it, on a task of our making it can only learn from its tokens together: the class is the
feature (of the first four) holding the largest value over the six tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from edgegossip.cli.app import cli
from edgegossip.data import device, own
from tests.helpers.onnx_models import compile_to

ZOO = Path(__file__).parent / "fixtures" / "zoo"
CHANCE = 0.25  # four balanced classes


def tokens(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).normal(size=(n, 6, 16)).astype(np.float32)
    return x, x[:, :, :4].max(1).argmax(1).astype(np.int64)


def test_one_file_is_cut_into_disjoint_near_equal_parts(tmp_path):
    x, y = tokens(103, 0)
    xe, ye = tokens(11, 1)
    np.savez(tmp_path / "own.npz", x=x, y=y, x_eval=xe, y_eval=ye)
    files = own.per_node(tmp_path / "own.npz", 4, seed=3, out=tmp_path / "cut")
    held = [device.from_file(f) for f in files]
    assert [len(h.y) for h in held] == [26, 26, 26, 25]
    assert [len(h.y_eval) for h in held] == [3, 3, 3, 2]
    # every row once: the parts' rows, sorted, are the file's
    rows = np.concatenate([h.x for h in held]).reshape(-1, 6 * 16)
    assert np.array_equal(np.sort(rows, axis=0), np.sort(x.reshape(-1, 6 * 16), axis=0)) and held[
        0
    ].row_shape == (6, 16)
    # no x_test: the nodes' held-out rows together score the average model
    t = own.test_set(tmp_path / "own.npz", files, 0.1, seed=3)
    assert len(t.y_test) == 11 and t.x_test.shape == (11, 96)


def test_one_file_is_cut_by_the_runs_partition(tmp_path):
    """Issue 57, item 1: `emulate --data FILE --partition dirichlet --beta B` cuts the user's
    file as simulate does its rows (partition.cut, the file's labels); a folder is the user's
    own cut, and a partition beside it is refused."""
    from edgegossip.data import partition

    x, y = tokens(400, 0)
    np.savez(tmp_path / "own.npz", x=x, y=y)
    files = own.per_node(tmp_path / "own.npz", 4, 3, tmp_path / "cut", "dirichlet", beta=0.1)
    for f, idx in zip(files, partition.dirichlet(y, 4, 0.1, 3)):
        np.testing.assert_array_equal(np.load(f)["y"], y[idx])
    with pytest.raises(device.DataMismatch, match="holds a file per node"):
        own.per_node(tmp_path / "cut", 4, 3, tmp_path / "again", "classes")


def test_a_folder_is_one_file_per_node_in_node_order(tmp_path):
    for i in (1, 2, 10):
        x, y = tokens(5, i)
        np.savez(tmp_path / f"device-{i}.npz", x=x, y=y)
    assert [f.stem for f in own.files_of(tmp_path, 3)] == ["device-1", "device-2", "device-10"]
    with pytest.raises(device.DataMismatch, match=r"3 \.npz files for 4 nodes"):
        own.files_of(tmp_path, 4)
    (tmp_path / "device-2.npz").write_bytes(b"not a zip")
    with pytest.raises(device.DataMismatch, match="device-2.npz is not a readable .npz"):
        own.per_node(tmp_path, 3, seed=0, out=tmp_path / "cut")


def test_bad_data_is_one_line_before_anything_runs(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    for data, code, said in (
        (tmp_path / "nope.npz", 4, "no such data set, file or folder"),
        (tmp_path / "notes.txt", 2, "a .npz file or a folder of them, one per node"),
        (tmp_path, 2, "0 .npz files for 2 nodes"),
    ):
        res = CliRunner().invoke(
            cli,
            ["emulate", "--nodes", "2", "--backend", "loopback", "--duration", "5"]
            + ["--data", str(data)],
        )
        assert res.exit_code == code and said in res.output, res.output
        assert res.output.count("\n") == 1 and "Traceback" not in res.output


@pytest.mark.root
def test_a_transformer_learns_from_each_devices_own_file_under_loss(root_only, tmp_path):
    """In namespaces, the kernel dropping 10%: each device reads its own file from a folder
    only its owner may enter (shared with the devices as the model is); the average model is
    scored on held-out rows the devices never trained on. 0.91 after 30 s on 3 nodes here."""
    private = tmp_path / "mine"
    private.mkdir(mode=0o700)
    for i in range(2):
        x, y = tokens(3000, i)
        np.savez(private / f"device-{i}.npz", x=x, y=y)
    model = compile_to(ZOO / "transformer-dynamo.onnx", tmp_path / "enc")
    res = CliRunner().invoke(
        cli,
        ["emulate", "--nodes", "2", "--model", str(model), "--data", str(private)]
        + ["--epochs", "15", "--loss", "0.1", "--out", str(tmp_path / "run"), "--json"],
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.output.strip().splitlines()[-1])
    assert s["loss_kind"] == "kernel (nftables)" and s["observed_loss"] > 0.03, s
    # 15 epochs (1,400 steps each), not seconds, which a busy machine makes fewer steps
    assert s["average_model_accuracy"] > 2 * CHANCE, s
    assert all(a["steps"] > 100 and a["accuracy"] > 2 * CHANCE for a in s["agents"]), s["agents"]


def _compiled(tmp_path, name: str, loss: str):
    from edgegossip.compiler.write import compile_file

    compile_file(ZOO / f"{name}-dynamo.onnx", loss, tmp_path / name)
    from edgegossip.models.compiled import CompiledModel

    return CompiledModel(tmp_path / name)


def _latent(n: int, seed: int) -> np.ndarray:
    """40 features from 4 latent factors and a little noise: what the dense autoencoder can
    learn to reconstruct (error floor 0.01, the noise's variance)."""
    rng = np.random.default_rng(seed)
    mix = np.random.default_rng(99).normal(size=(4, 40))
    return (rng.normal(size=(n, 4)) @ mix / 2 + 0.1 * rng.normal(size=(n, 40))).astype(np.float32)


def test_an_mse_models_targets_come_from_y_or_are_its_input(tmp_path):
    """Item 5: targets in the output's shape (regression), or no y at all (an autoencoder:
    the input is its own target, held once); a target of the wrong size is one line."""
    from edgegossip.agent.shard import Shard
    from edgegossip.config import AgentConfig

    x = _latent(60, 0)
    np.savez(tmp_path / "ae.npz", x=x)
    np.savez(tmp_path / "reg.npz", x=x, y=x[:, :40] * 2)
    np.savez(tmp_path / "bad.npz", x=x, y=x[:, :3])
    model = _compiled(tmp_path, "dense_autoencoder", "mse")
    for name in ("ae", "reg"):
        cfg = AgentConfig(
            id=0,
            listen="127.0.0.1:1",
            algorithm="local",
            source="file",
            path=str(tmp_path / f"{name}.npz"),
        )
        data = device.from_file(cfg.path, targets=True)
        device.check(data, 40, model.classes, model.input_shape, "mse")
        xb, yb = Shard(cfg, data).batch_at(0)
        assert yb.shape == (len(xb), 40)
        assert (yb is xb) == (name == "ae")  # no second copy of an autoencoder's rows
        scores = data.evaluate(model, model.init(0), 100)
        assert scores["accuracy"] is None and scores["eval_mse"] > 0.1
    bad = device.from_file(tmp_path / "bad.npz", targets=True)
    with pytest.raises(device.DataMismatch, match="targets have 3 values; the model outputs 40"):
        device.check(bad, 40, model.classes, model.input_shape, "mse")


def test_token_ids_feed_an_embedding_and_pixels_are_refused_as_ids(tmp_path):
    model = _compiled(tmp_path, "embedding", "cross-entropy")
    assert model.input_dtype == np.int64
    ids = np.random.default_rng(0).integers(0, 50, (16, 12))
    np.savez(tmp_path / "ids.npz", x=ids, y=ids[:, 0] % 4)
    data = device.from_file(tmp_path / "ids.npz")
    device.check(data, 12, 4, model.input_shape, ids=True)
    p, g = model.init(0), np.zeros(model.n_params, np.float32)
    first = model.loss_grad(p, g, data.x[:8], data.y[:8], None)
    for _ in range(50):
        model.loss_grad(p, g, data.x[:8], data.y[:8], None)
        p -= 0.5 * g
    assert model.loss_grad(p, g, data.x[:8], data.y[:8], None) < first / 2
    np.savez(tmp_path / "px.npz", x=ids.astype(np.uint8), y=ids[:, 0] % 4)
    with pytest.raises(device.DataMismatch, match="uint8 pixels; store token ids as int64"):
        device.check(device.from_file(tmp_path / "px.npz"), 12, 4, model.input_shape, ids=True)


def test_an_autoencoder_learns_from_its_own_rows_in_an_emulated_fleet(tmp_path):
    """Two agents on loopback with 10% loss, each with its part of a file holding only x: the
    average model's test error (per element) well below the data's own variance, which is
    what predicting nothing would score."""
    x_test = _latent(1000, 2)
    np.savez(tmp_path / "ae.npz", x=_latent(6000, 1), x_test=x_test)
    _compiled(tmp_path, "dense_autoencoder", "mse")
    res = CliRunner().invoke(
        cli,
        ["emulate", "--nodes", "2", "--backend", "loopback", "--loss", "0.1"]
        + ["--model", str(tmp_path / "dense_autoencoder"), "--data", str(tmp_path / "ae.npz")]
        # a number of epochs, not seconds: a busy machine gives a timed run fewer steps
        + ["--epochs", "30", "--out", str(tmp_path / "run"), "--json"],
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.output.strip().splitlines()[-1])
    assert s["average_model_accuracy"] is None
    assert s["average_model_mse"] < 0.25 * float(np.square(x_test).mean()), s
    assert all(a["mse"] is not None and a["eval_mse"] is not None for a in s["agents"])


def test_epochs_over_the_users_own_files_count_each_nodes_rows(tmp_path):
    """--epochs with --data FILE: each node's steps from its own part's rows."""
    from edgegossip.emulate.fleet import EmulatedFleet, FleetSpec

    x, y = tokens(100, 0)
    np.savez(tmp_path / "own.npz", x=x, y=y)
    spec = FleetSpec(
        nodes=2,
        algorithm="elastic-gossip",
        backend="loopback",
        out=tmp_path / "run",
        epochs=2.0,
        data=str(tmp_path / "own.npz"),
        settings={"batch": 10},
    )
    fleet = EmulatedFleet(spec)
    fleet.data_files = fleet._own_data()
    cfg = fleet._config(0, fleet.addresses())
    assert cfg.source == "file" and cfg.max_steps == 2 * 50 // 10


def test_simulate_trains_an_autoencoder_on_a_folder_of_one_file_per_worker(tmp_path):
    """Item 5 in simulate: each worker's rows its own file's, the rows their own targets, the
    scores mse per element (acc null); the average model's test error well below what
    predicting nothing scores. A partition by class is refused for an mse model, in one line."""
    (tmp_path / "own").mkdir()
    for i in range(4):
        np.savez(tmp_path / "own" / f"device-{i}.npz", x=_latent(1000, 10 + i))
    x_test = _latent(1000, 2)
    np.savez(tmp_path / "one.npz", x=_latent(4000, 1), x_test=x_test)
    _compiled(tmp_path, "dense_autoencoder", "mse")
    run = ["simulate", "--algorithm", "elastic-gossip", "--nodes", "4", "--loss", "0.1"]
    run += ["--model", str(tmp_path / "dense_autoencoder"), "--lr", "0.05", "--json"]
    res = CliRunner().invoke(cli, run + ["--data", str(tmp_path / "own"), "--epochs", "60"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output.strip().splitlines()[-1])
    assert row["acc_average"] is None and row["data"] == str(tmp_path / "own")
    assert row["mse_average"] < 0.25 * float(np.square(x_test).mean()), row
    refused = CliRunner().invoke(
        cli, run + ["--data", str(tmp_path / "one.npz"), "--partition", "dirichlet"]
    )
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines() == [
        "edgegossip: error: --partition dirichlet cuts by class; an mse model has none"
    ]
