"""Issue 43: the user's own model, end to end. A model exported from PyTorch is compiled by
`edgegossip model compile`, and agents train it on their own .npz files over real sockets; the
Fashion-MNIST CNN trains in an emulated fleet. Bad input is one line and exit 2: a model with an
op outside the table, data whose shape is not the model's, an artifact altered after
compiling."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from edgegossip.config import AgentConfig
from edgegossip.metrics import read
from tests.test_agent import _start

FIXTURES = Path(__file__).parent / "fixtures" / "onnx"
ZOO = Path(__file__).parent / "fixtures" / "zoo"
pytestmark = pytest.mark.timeout(300)


def eg(*args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def compiled(tmp_path, name: str) -> Path:
    out = tmp_path / f"{name}-compiled"
    p = eg("model", "compile", FIXTURES / f"{name}.onnx", "--loss", "cross-entropy", "--out", out)
    assert p.returncode == 0, p.stderr
    return out


def compile_json(out: Path) -> str:
    """`model compile --json` of the Fashion-MNIST CNN into out: its stdout."""
    p = eg(
        "model",
        "compile",
        FIXTURES / "fashion_cnn.onnx",
        "--loss",
        "cross-entropy",
        "--out",
        out,
        "--json",
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def vibration(n: int, seed: int, transpose: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Windows of 3 sensor channels over 32 steps whose class (0-3) is the frequency of a
    sinusoid buried in noise: what vibration_cnn (a 1-D CNN, channels first) is for."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    t = np.arange(32) / 32
    phase = rng.uniform(0, 2 * np.pi, (n, 3, 1))
    x = np.sin(2 * np.pi * (1 + 2 * y)[:, None, None] * t + phase)
    x = (x + 0.5 * rng.normal(size=x.shape)).astype(np.float32)
    return (x.transpose(0, 2, 1) if transpose else x), y


def test_compile_writes_a_checked_artifact(tmp_path):
    m = json.loads(compile_json(tmp_path / "a"))
    assert m["input"]["shape"] == [1, 28, 28] and m["classes"] == 10
    assert m["params"]["count"] == 20586 and m["opset"] == 18
    assert {"BatchNormalization", "Conv", "MaxPool", "Gemm"} <= set(m["ops"])
    assert set(m["files"]) == {"train.onnx", "infer.onnx", "initial.npy", "model.onnx"}
    assert (
        json.loads(compile_json(tmp_path / "b"))["digest"] == m["digest"]
    )  # the same model, the same digest
    # a training graph of standard ONNX ops only
    train = onnx.load(str(tmp_path / "a" / "train.onnx"))
    assert {n.domain for n in train.graph.node} <= {""}


def test_bench_train_measures_a_compiled_model(tmp_path):
    folder = compiled(tmp_path, "vibration_cnn")
    p = eg("bench", "train", "--model", folder, "--steps", "3", "--threads", "2", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["threads"] == 2
    rows = json.loads(p.stdout)["results"]
    assert [(r["backend"], r["batch"], r["params"]) for r in rows] == [
        ("compiled", 32, 268),
        ("compiled", 128, 268),
    ]
    assert all(r["ms_per_step"] > 0 and r["peak_rss_mb"] > 10 for r in rows)


def test_bench_train_profile_names_a_depthwise_models_ops(tmp_path):
    """--profile: a compiled row's step by kind of op, from onnxruntime's own profiler. The
    zoo's DS-CNN (torch's default export) has two depthwise convolutions: each step runs
    each once forward and once as its input's gradient (a ConvTranspose), named apart from
    its ungrouped convolutions (the stem's one input channel is not depthwise)."""
    folder = tmp_path / "ds_cnn"
    p = eg(
        "model", "compile", ZOO / "ds_cnn-dynamo.onnx", "--loss", "cross-entropy", "--out", folder
    )
    assert p.returncode == 0, p.stderr
    p = eg("bench", "train", "--model", folder, "--steps", "3", "--profile", "--json")
    assert p.returncode == 0, p.stderr
    for row in json.loads(p.stdout)["results"]:
        prof = row["profile"]
        ops = {r["op"]: r for r in prof["ops"]}
        assert ops["Conv depthwise"]["calls"] == 2 and ops["ConvTranspose depthwise"]["calls"] == 2
        assert ops["Conv"]["calls"] == 3  # the stem and the two pointwise convolutions
        assert abs(sum(r["share"] for r in prof["ops"]) - 1) < 0.01  # shares rounded to 0.001
        assert 0 < prof["kernels_ms"] <= prof["run_ms"]
    p = eg("bench", "train", "--profile")
    assert p.returncode == 2 and "give --model DIR" in p.stderr, p.stderr


def test_bench_train_reference_refusals_are_one_line(tmp_path):
    """--reference names the model's PyTorch class; without --model, without such a file, or
    with a Python that has no torch (this venv: torch is never a dependency), one line."""
    net = tmp_path / "net.py"
    net.write_text("class Net:\n    pass\n")
    folder = compiled(tmp_path, "head")
    cases = [
        (["--reference", f"{net}:Net"], 2, "give --model DIR"),
        (["--model", folder, "--reference", f"{tmp_path}/none.py:Net"], 2, "expected FILE.py"),
        (["--model", folder, "--reference", f"{net}:Net", "--steps", "1"], 1, "torch"),
    ]
    for args, code, words in cases:
        p = eg("bench", "train", *args)
        assert p.returncode == code, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr


def test_an_unsupported_op_and_a_file_that_is_no_model_are_one_line(tmp_path):
    g = helper.make_graph(
        [
            helper.make_node("Hardmax", ["x"], ["h"], name="odd_part"),
            helper.make_node("MatMul", ["h", "W"], ["z"], name="proj"),
        ],
        "m",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, ["batch", 3])],
        [onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "W")],
    )
    # Hardmax on the input only: no parameter's gradient passes it, so this one compiles
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "ok.onnx"
    )
    assert (
        eg(
            "model", "compile", tmp_path / "ok.onnx", "--loss", "mse", "--out", tmp_path / "o"
        ).returncode
        == 0
    )
    g.node[0].input[0], g.node[1].input[0] = "z0", "x"  # now Hardmax follows a parameter
    g.node[1].output[0] = "z0"
    g.node.append(helper.make_node("Hardmax", ["z0"], ["z"], name="odd_part"))
    del g.node[0]
    onnx.save(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bad.onnx"
    )
    p = eg("model", "compile", tmp_path / "bad.onnx", "--loss", "mse", "--out", tmp_path / "b")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "node odd_part: op Hardmax has no gradient rule" in p.stderr
    assert not (tmp_path / "b").exists()
    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07not a protobuf at all")
    p = eg("model", "compile", tmp_path / "junk.onnx", "--loss", "mse", "--out", tmp_path / "j")
    assert p.returncode == 2 and "not an ONNX model" in p.stderr and p.stderr.count("\n") == 1


def _agents(tmp_path, free_udp_port, model: Path, files: list[Path], **kw) -> list[AgentConfig]:
    ports = [free_udp_port() for _ in files]
    from edgegossip.config import Peer

    base = dict(
        workers=len(files),
        algorithm="elastic-gossip",
        model=str(model),
        source="file",
        eval_every=50,
        eval_examples=200,
        batch=32,
        lr=0.05,
        momentum=0.9,
        p=0.1,
        deadline_s=2.0,
        key="compiled-model-test-fleet",
    )
    base.update(kw)
    return [
        AgentConfig(
            id=i,
            listen=f"127.0.0.1:{ports[i]}",
            peers=tuple(Peer(j, "127.0.0.1", ports[j]) for j in range(len(files)) if j != i),
            path=str(f),
            output=str(tmp_path / f"a{i}"),
            **base,
        )
        for i, f in enumerate(files)
    ]


def test_two_agents_train_a_pytorch_1d_cnn_on_their_own_files(tmp_path, free_udp_port, procs):
    model = compiled(tmp_path, "vibration_cnn")
    files = []
    for i in range(2):
        x, y = vibration(600, seed=i)
        files.append(tmp_path / f"dev{i}.npz")
        np.savez(files[-1], x=x, y=y)
    agents = []
    for cfg in _agents(tmp_path, free_udp_port, model, files):
        (tmp_path / f"c{cfg.id}").mkdir()
        agents.append(_start(cfg, tmp_path / f"c{cfg.id}"))
    procs += agents
    deadline = time.monotonic() + 120
    best = [0.0, 0.0]
    while time.monotonic() < deadline and min(best) < 0.9:
        time.sleep(1)
        for i in range(2):
            path = tmp_path / f"a{i}" / "metrics.jsonl"
            recs = (
                [r for r in read(path) if r.get("accuracy") is not None] if path.is_file() else []
            )
            if recs:
                best[i] = recs[-1]["accuracy"]
    for a in agents:
        a.send_signal(signal.SIGTERM)
    outs = [a.communicate(timeout=30) for a in agents]
    assert min(best) >= 0.9, (best, [o[1][-500:] for o in outs])  # chance is 0.25
    last = [r for r in read(tmp_path / "a0" / "metrics.jsonl") if "exchanges" in r][-1]
    assert last["exchanges"].get("completed", 0) + last["exchanges"].get("partial", 0) > 0


def test_data_of_another_shape_and_an_altered_artifact_are_refused(tmp_path, free_udp_port):
    model = compiled(tmp_path, "vibration_cnn")
    x, y = vibration(50, seed=0, transpose=True)  # [n, 32, 3]: time first, the model's is 3x32
    np.savez(tmp_path / "wrong.npz", x=x, y=y)
    (cfg,) = _agents(tmp_path, free_udp_port, model, [tmp_path / "wrong.npz"], algorithm="local")
    (tmp_path / "c").mkdir()
    p = _start(cfg, tmp_path / "c")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "data: the examples are 32x3; the model takes 3x32" in err
    with open(model / "train.onnx", "ab") as f:
        f.write(b"\0")
    x, y = vibration(50, seed=0)
    np.savez(tmp_path / "right.npz", x=x, y=y)
    (cfg,) = _agents(tmp_path, free_udp_port, model, [tmp_path / "right.npz"], algorithm="local")
    p = _start(cfg, tmp_path / "c")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and err.count("\n") == 1, err
    assert "train.onnx: its SHA-256 is not the manifest's" in err


@pytest.mark.slow
def test_the_fashion_cnn_trains_in_an_emulated_fleet(tmp_path):
    """The second task: the PyTorch CNN (Conv-BN-ReLU-Pool twice, a linear head) on
    Fashion-MNIST, two agents on loopback with 10% of datagrams lost, 16 s: the average model
    scores well above what its exported weights did (0.10, chance) on the 10,000 test images."""
    model = compiled(tmp_path, "fashion_cnn")
    p = eg(
        "emulate",
        "--nodes",
        "2",
        "--backend",
        "loopback",
        "--model",
        model,
        "--data",
        "fashion-mnist",
        "--duration",
        "16",
        "--out",
        tmp_path / "run",
        "--json",
        timeout=280,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["average_model_accuracy"] > 0.75, s
    assert all(a["accuracy"] > 0.7 and a["steps"] > 100 for a in s["agents"]), s["agents"]


def test_a_checkpoint_is_exported_only_with_the_model_that_trained_it(tmp_path, mnist_data):
    """Issue 54, item 9: a checkpoint did not record which model trained it, so `export
    --model` took another model of the same layout. Every checkpoint now holds the artifact's
    digest (agent/checkpoints.py), and export (and collect) refuse another model's in one
    line."""
    from edgegossip import checkpoint
    from edgegossip.agent.checkpoints import Checkpoints
    from edgegossip.config import AgentConfig
    from edgegossip.models import make_model

    a = compiled(tmp_path, "fashion_cnn")
    b = tmp_path / "mse-compiled"  # the same layout, another model (another loss)
    p = eg("model", "compile", FIXTURES / "fashion_cnn.onnx", "--loss", "mse", "--out", b)
    assert p.returncode == 0, p.stderr
    model = make_model(str(a))
    assert (
        make_model(str(b)).n_params == model.n_params and make_model(str(b)).digest != model.digest
    )
    ckpt = tmp_path / "ckpt"
    cfg = AgentConfig(
        id=0, listen="127.0.0.1:1", workers=1, algorithm="local", model=str(a), output=str(ckpt)
    )
    state = Checkpoints(cfg, model.digest).state(model.init(0), 5)
    assert checkpoint.digest_of(state) == model.digest
    checkpoint.save(ckpt, **state)
    refused = eg("export", ckpt, tmp_path / "b.onnx", "--model", b, "--no-check")
    assert refused.returncode == 2 and "trained by model" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "b.onnx").exists()
    done = eg("export", ckpt, tmp_path / "a.onnx", "--model", a, "--no-check")
    assert done.returncode == 0, done.stderr
