"""`emulate --export compose` run for real with Debian's podman and podman-compose (root, CI):
3 agents training the user's own model (a softmax regression as an exporter writes it, compiled
by `model compile`) on Fashion-MNIST, 10% loss in bursts of 4 datagrams (each link its own
pattern) applied inside each container, 20 s. The agents must learn and the receivers must
observe the configured loss within 4 standard errors, in bursts. No registry: the base image is
the lab's Debian root, imported locally."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from edgegossip.data import mnist
from edgegossip.fleet.bundle import MANIFEST
from edgegossip.report.summary import summarize
from tests.helpers.loss import assert_observed_loss
from tests.helpers.onnx_models import compile_to, softmax_regression

BASE = "localhost/edgegossip-test-base:latest"


@pytest.mark.usefixtures("mnist_data")  # the export checks its data set first
def test_export_without_pyyaml_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from edgegossip.cli.app import cli

    monkeypatch.setitem(sys.modules, "yaml", None)  # as if the fleet extra were not installed
    out = tmp_path / "compose"
    res = CliRunner().invoke(
        cli, ["emulate", "--export", "compose", "--out", str(out), "--duration", "10"]
    )
    assert res.exit_code == 2
    assert "PyYAML, which is not installed" in res.output and len(res.output.splitlines()) == 1
    assert not out.exists()


def test_a_boards_limits_are_its_containers(tmp_path):
    """--devices (and --cpu) carry into the export as each service's own cgroup limits, as
    docker compose and podman-compose set them: cpus and mem_limit."""
    from edgegossip.emulate.compose import _service
    from edgegossip.emulate.fleet import FleetSpec
    from edgegossip.run import Device

    devices = (Device("pi-zero-2w", 0.0406, 512), Device(cpu=0.25))
    spec = FleetSpec(nodes=3, out=tmp_path, devices=devices)
    zero, pi5, free = (_service(spec, i, f"node{i}", BASE) for i in range(3))
    assert (zero["cpus"], zero["mem_limit"], pi5["cpus"]) == (0.0406, "512m", 0.25)
    assert "mem_limit" not in pi5 and "cpus" not in free and "mem_limit" not in free


@pytest.fixture
def podman_env(tmp_path, root_only):
    for tool in ("podman", "podman-compose"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: .ci/run installs podman and podman-compose")
    conf = tmp_path / "containers.conf"
    # runc: crun fails on this host's hybrid cgroups; ulimits within the host's hard limits
    # netavark + aardvark-dns: the services find each other by name (CNI here has no DNS plugin)
    conf.write_text(
        '[engine]\nruntime = "runc"\n[containers]\n'
        'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
        '[network]\nnetwork_backend = "netavark"\n'
    )
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    from edgegossip.lab import root

    r = root.ensure(progress=lambda m: None)
    tar = subprocess.Popen(["tar", "-C", str(r), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["podman", "import", "-", BASE],
        stdin=tar.stdout,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    tar.wait()
    yield env
    subprocess.run(
        ["podman", "rmi", "-f", BASE, "localhost/edgegossip-agent:latest"],
        env=env,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compose_fleet_learns_its_own_model_under_loss_in_podman(tmp_path, podman_env):
    out = tmp_path / "compose"
    model = compile_to(softmax_regression(tmp_path / "softmax.onnx"), tmp_path / "compiled")
    fashion = mnist.load(name="fashion-mnist")  # `make test` fetches it
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgegossip.cli.app",
            "emulate",
            "--export",
            "compose",
            "--out",
            str(out),
            "--nodes",
            "3",
            "--model",
            str(model),
            "--data",
            "fashion-mnist",
            "--loss",
            "0.1",
            "--loss-model",  # bursts: per-link patterns, by the links' fixed addresses
            "gilbert-elliott",
            "--burst",
            "4",
            "--rate",
            "none",
            "--p",
            "1/4",
            # an exchange whose last datagram was lost waits out its deadline before the next
            # starts: at the fixed 5 s, a 10 s run once gave a device only 97 datagrams
            # (adaptive deadlines start a third more exchanges: docs/results.md), and with them
            # a busy machine's 10 s once gave one 74 (a peer silent for 3 s): 20 s
            "--deadline",
            "adaptive",
            "--duration",
            "20",
            "--base",
            BASE,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["services"] == ["node0", "node1", "node2"]
    # the containers get the data set and the model named, and onnxruntime to train it in
    assert (out / "data" / "fashion-mnist.npz").is_file()
    assert (out / "model" / "train.onnx").is_file()
    assert "onnx" in json.loads((out / "wheels" / MANIFEST).read_text())["extras"]
    compose = ["podman-compose", "-p", f"egtest{os.getpid()}", "-f", str(out / "compose.yaml")]
    t0 = time.monotonic()
    try:
        up = subprocess.run(
            compose + ["up", "-d"],
            env=podman_env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=out,
        )
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        # podman-compose exits 0 even when podman failed to build or create a container
        # (netavark without iptables did exactly that): every service must have one
        made = subprocess.run(
            [
                "podman",
                "ps",
                "-a",
                "--format",
                "{{.Names}}",
                "--filter",
                f"label=io.podman.compose.project=egtest{os.getpid()}",
            ],
            env=podman_env,
            capture_output=True,
            text=True,
        )
        names = made.stdout.split()
        assert len(names) == 3 and all(
            any(s in n for n in names) for s in ("node0", "node1", "node2")
        ), f"containers {names}; podman said:\n{(up.stdout + up.stderr)[-3000:]}"
        started = time.monotonic()
        while time.monotonic() - started < 150:  # the agents stop themselves after 20 s
            ps = subprocess.run(
                [
                    "podman",
                    "ps",
                    "-q",
                    "--filter",
                    f"label=io.podman.compose.project=egtest{os.getpid()}",
                ],
                env=podman_env,
                capture_output=True,
                text=True,
            )
            if not ps.stdout.strip():
                break
            time.sleep(3)
        # an agent that never began (no session file) prints its threads' stacks into the logs
        for n in range(3):
            if not (out / f"agent{n}" / "session").exists():
                subprocess.run(
                    ["podman", "kill", "--signal", "USR1", f"egtest{os.getpid()}_node{n}_1"],
                    env=podman_env,
                    capture_output=True,
                    timeout=60,
                )
                time.sleep(2)
        logs = subprocess.run(
            compose + ["logs"], env=podman_env, capture_output=True, text=True, cwd=out
        )
    finally:
        subprocess.run(
            compose + ["down"], env=podman_env, capture_output=True, timeout=300, cwd=out
        )
        # podman-compose 1.0 leaves the project's network (a bridge and a /24) behind
        subprocess.run(
            ["podman", "network", "rm", "-f", f"egtest{os.getpid()}_fleet"],
            env=podman_env,
            capture_output=True,
            timeout=60,
        )
    print(f"compose: build + up + 20 s run took {time.monotonic() - t0:.0f} s")
    assert "loss 10% by nftables (ingress, gilbert-elliott)" in logs.stdout + logs.stderr, (
        logs.stdout[-2000:]
    )
    s = summarize(out, 3, str(model), 0.1, "compose", 20.0, None, fashion)
    print(
        json.dumps(
            {k: s[k] for k in ("observed_loss", "observed_burst_mean", "average_model_accuracy")}
        )
    )
    assert all(a["steps"] > 0 and a["datagrams_received"] > 100 for a in s["agents"]), (
        f"{s['agents']}\n{(logs.stdout + logs.stderr)[-12000:]}"
    )
    # a softmax regression reaches about 0.84 on Fashion-MNIST when trained to convergence
    assert s["average_model_accuracy"] > 0.7, s["average_model_accuracy"]
    assert_observed_loss(s, 0.1, burst=4)
    # independent loss would give runs of about 1.1; the patterns' own runs average 4
    assert 2.5 < s["observed_burst_mean"] < 6.5, s["observed_burst_mean"]
