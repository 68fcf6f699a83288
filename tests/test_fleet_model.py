"""Issue 43, item 4: a fleet trains a compiled model. `fleet init --model DIR` copies the
artifact into the fleet folder, every device's config names the device's copy and its digest,
deploy ships it only where the device holds another, a device with another model is refused by
its peers' link keys and by its own agent, and `fleet collect` writes the averaged parameters
back into the user's own ONNX file (BatchNorm statistics re-estimated), which stock
onnxruntime runs."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from helpers.onnx_models import compile_to, softmax_regression
from test_inbox import PLAN, _collect, _datagrams

from edgegossip.agent.agent import Agent
from edgegossip.artifact import MEMORY
from edgegossip.config import AgentConfig, ConfigError
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.keys import LinkKeys
from edgegossip.fleet import agentconf, deploy, inventory
from edgegossip.models import footprint, writeback
from edgegossip.models.compiled import CompiledModel

FIXTURES = Path(__file__).parent / "fixtures" / "onnx"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("model")
    return compile_to(softmax_regression(tmp / "softmax.onnx"), tmp / "compiled")


def eg(*args):
    return subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _init(tmp_path, artifact) -> inventory.Fleet:
    p = eg("fleet", "init", tmp_path / "f", "--devices", "3", "--model", artifact)
    assert p.returncode == 0, p.stderr
    return inventory.load(tmp_path / "f")


def test_init_copies_the_model_and_each_config_names_the_devices_copy(tmp_path, artifact):
    fleet = _init(tmp_path, artifact)
    digest = CompiledModel(artifact).digest
    assert fleet.settings["train"]["model"] == "model"
    assert CompiledModel(tmp_path / "f" / "model").digest == digest
    assert agentconf.model_digest(fleet) == digest
    for d in fleet.devices:
        cfg = agentconf.render(fleet, d)
        assert (cfg.model, cfg.model_digest) == (agentconf.MODEL, digest)


def test_deploy_ships_the_model_only_to_a_device_that_holds_another(tmp_path, artifact):
    fleet = _init(tmp_path, artifact)
    d = fleet.devices[0]
    digest = agentconf.model_digest(fleet)
    files = deploy.device_files(fleet, d, {"model_sha": ""}, False, tmp_path, {"wheels": []})
    shipped = sorted(n for n in files if n.startswith("model/"))
    names = json.loads((tmp_path / "f" / "model" / "manifest.json").read_text())["files"]
    assert shipped == sorted(f"model/{n}" for n in ["manifest.json", *names])
    files = deploy.device_files(fleet, d, {"model_sha": digest}, False, tmp_path, {"wheels": []})
    assert not [n for n in files if n.startswith("model/")]


def test_deploy_ships_the_measured_footprint_and_refuses_a_device_it_cannot_fit(tmp_path, artifact):
    """Issue 68, item 1: a memory.json as `model compile --batch 32` writes it (the figures are
    a MobileNetV2's order; the measuring is tests/test_footprint.py's) travels with the model,
    and a device whose RAM is below the step at its batch is refused before anything ships;
    one with room is not."""
    fleet = _init(tmp_path, artifact)
    footprint.write(tmp_path / "f" / "model", {footprint.WHOLE: [(1, 133.0), (32, 656.0)]})
    d = fleet.devices[0]
    files = deploy.device_files(fleet, d, {"model_sha": ""}, False, tmp_path, {"wheels": []})
    assert files[f"model/{MEMORY}"] == tmp_path / "f" / "model" / MEMORY
    assert deploy.memory_problem(fleet, d, 427) == (
        "a training step of the fleet's model at batch 32 needs about 656 MB (as model compile "
        "measured it) and the device has 427 MB: set a smaller train.batch for it, or freeze "
        "more of the model"
    )
    assert deploy.memory_problem(fleet, d, 3796) is None
    assert deploy.memory_problem(fleet, d, None) is None  # a device that did not say


def test_an_altered_model_in_the_fleet_folder_is_one_line(tmp_path, artifact):
    _init(tmp_path, artifact)
    train = tmp_path / "f" / "model" / "train.onnx"
    train.write_bytes(train.read_bytes()[:-1] + b"\x00")
    p = eg("fleet", "status", "--fleet", tmp_path / "f")
    assert p.returncode == 2 and "train.onnx: its SHA-256 is not the manifest's" in p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1
    p = eg("fleet", "init", tmp_path / "g", "--devices", "2", "--model", "resnet")
    assert (
        p.returncode == 2
        and "is not mlp, logreg, cnn or the folder of a compiled model" in p.stderr
    )


def test_link_keys_bound_to_another_model_make_datagrams_that_are_dropped():
    """The tag a sender with another model makes fails: dropped as bad_tag, nothing merged."""
    root = b"k" * 32
    a, b = "a" * 64, "b" * 64
    assert LinkKeys.of(root).bound(a).key(2, 0) != LinkKeys.of(root).bound(b).key(2, 0)
    assert LinkKeys.of(root).bound(a).key(2, 0) == LinkKeys.of(root).bound(a).key(2, 0)
    assert LinkKeys.of(root).bound(a).key(2, 0) != LinkKeys.of(root).key(2, 0)
    x = np.arange(PLAN.n_params, dtype=np.float32)
    inbox = Inbox.build(PLAN, LinkKeys.of(root).bound(a), 1)
    for d in _datagrams(x, key=LinkKeys.of(root).bound(b)):
        inbox.ingest(memoryview(d))
    assert inbox.counter.drops["bad_tag"] == PLAN.n_chunks and _collect(inbox)[0] == 0
    for d in _datagrams(x, key=LinkKeys.of(root).bound(a)):
        inbox.ingest(memoryview(d))
    got, out, _ = _collect(inbox)
    assert got == PLAN.n_chunks and (out == x).all()


def test_an_agent_holding_another_model_than_its_config_names_does_not_start(tmp_path, artifact):
    cfg = AgentConfig(
        id=0,
        listen="127.0.0.1:9",
        algorithm="local",
        model=str(artifact),
        model_digest="0" * 64,
        output=str(tmp_path),
    )
    with pytest.raises(ConfigError) as e:
        Agent(cfg)
    assert str(e.value).startswith("train.model: ") and "not the fleet's 000000000000" in str(
        e.value
    )


def _batch(m, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *m.input_shape)).astype(np.float32)
    return x, rng.integers(0, m.classes, n)


def test_written_back_model_runs_in_onnxruntime_as_the_trained_one(tmp_path):
    """No BatchNorm (a classifier head that ends in Softmax): the user's file with the trained
    parameters gives the softmax of the trained logits."""
    m = CompiledModel(compile_to(FIXTURES / "head.onnx", tmp_path / "head"))
    p = m.init(0) + np.random.default_rng(1).normal(0, 0.05, m.n_params).astype(np.float32)
    out = writeback.write(m, p, tmp_path / "avg.onnx", {})
    x, _ = _batch(m, 64, 2)
    s = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    z = m.logits(p, x).astype(np.float64)
    want = np.exp(z - z.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    # float32 through one Gemm-Sigmoid-Gemm-Softmax, values in (0, 1)
    np.testing.assert_allclose(s.run(None, {"x": x})[0], want, atol=1e-5)


def test_batchnorm_statistics_are_re_estimated_for_the_written_parameters(tmp_path):
    m = CompiledModel(compile_to(FIXTURES / "fashion_cnn.onnx", tmp_path / "cnn"))
    p = m.init(0) + np.random.default_rng(1).normal(0, 0.01, m.n_params).astype(np.float32)
    x, y = _batch(m, 512, 3)
    # one batch: the written model's inference on it is the training graph's forward on it
    running = writeback.running_statistics(m, p, [(x, y)])
    assert len(running) == 2 * len(m.manifest.state) // 2 == 4
    s = ort.InferenceSession(
        str(writeback.write(m, p, tmp_path / "avg.onnx", running)),
        providers=["CPUExecutionProvider"],
    )
    # float32 convolutions summed in different orders; logits of magnitude ~3
    np.testing.assert_allclose(
        s.run(None, {s.get_inputs()[0].name: x})[0], m.logits(p, x), atol=5e-5, rtol=1e-5
    )
    # two halves: the first BatchNorm's estimate is the whole batch's mean and variance (its
    # input does not depend on any other BatchNorm), by the law of total variance
    halves = writeback.running_statistics(m, p, [(x[:256], y[:256]), (x[256:], y[256:])])
    first = m.manifest.state[:2]
    for st in first:
        name = st.initializer
        np.testing.assert_allclose(halves[name], running[name], rtol=1e-4, atol=1e-6)


def test_export_writes_a_checkpoint_of_a_compiled_model_into_its_own_file(tmp_path):
    """`edgegossip export CKPT OUT --model DIR`: the Fashion-MNIST CNN's file with the
    checkpoint's parameters and estimated BatchNorm statistics, which classifies the test set
    as the trained model does (batch statistics there, running ones here: nearly always)."""
    from edgegossip import checkpoint

    folder = compile_to(FIXTURES / "fashion_cnn.onnx", tmp_path / "cnn")
    m = CompiledModel(folder)
    params = m.init(0)
    # as an agent writes it: with the digest of the model that trained it
    digest = checkpoint.digest_array(m.digest)
    checkpoint.save(tmp_path / "ckpt", params=params, step=np.array(5), **digest)
    p = eg(
        "export",
        tmp_path / "ckpt",
        tmp_path / "out.onnx",
        "--model",
        folder,
        "--data",
        "fashion-mnist",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["n_params"] == m.n_params and got["max_abs_diff"] is None
    assert got["same_class"] > 0.95, got
    p = eg("export", tmp_path / "ckpt", tmp_path / "x.onnx", "--model", "cnn")
    assert p.returncode == 2 and "not a cnn" in p.stderr


def test_a_fleet_on_fashion_mnist_ships_that_data_set_or_cuts_its_files_from_it(tmp_path):
    """`fleet init --data fashion-mnist`: every device's config says so and deploy ships the
    operator's cached copy (as cache/fashion-mnist.npz) to a device that does not hold it;
    with --split, each device's file is cut from Fashion-MNIST, not MNIST."""
    from edgegossip import paths
    from edgegossip.data import mnist

    p = eg("fleet", "init", tmp_path / "f", "--devices", "2", "--data", "fashion-mnist")
    assert p.returncode == 0, p.stderr
    fleet = inventory.load(tmp_path / "f")
    d = fleet.devices[0]
    assert agentconf.render(fleet, d).source == "fashion-mnist"
    cache = mnist.cache_path("fashion-mnist")
    files = deploy.device_files(fleet, d, {}, False, tmp_path, {"wheels": []})
    assert files["cache/fashion-mnist.npz"] == cache and "cache/mnist.npz" not in files
    held = {"dataset_sha": {"fashion-mnist": paths.sha256_of(cache)}}
    assert not [
        n
        for n in deploy.device_files(fleet, d, held, False, tmp_path, {"wheels": []})
        if n.startswith("cache/")
    ]
    p = eg(
        "fleet",
        "init",
        tmp_path / "g",
        "--devices",
        "2",
        "--data",
        "fashion-mnist",
        "--split",
        "iid",
    )
    assert p.returncode == 0, p.stderr
    with np.load(tmp_path / "g" / "data" / "device-0.npz") as z:
        rows = {r.reshape(-1).tobytes() for r in z["x"][:50]}
    fashion, digits = mnist.load(name="fashion-mnist"), mnist.load()
    assert rows <= {r.tobytes() for r in fashion.x_train} and not rows & {
        r.tobytes() for r in digits.x_train
    }
