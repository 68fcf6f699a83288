"""How an emulated fleet ends when it does not end well. Issue 68, item 1: an emulated board's
agent that the kernel kills at the board's memory limit is named as exactly that, in one line,
with the limit and the peak, and the run ends with an error; one whose measured step cannot fit
its board refuses before it trains. And a run stopped by SIGTERM tears
its fleet down as Ctrl-C does."""

import signal
import subprocess
import sys

import pytest

from edgegossip import exit_codes
from edgegossip.metrics import read
from edgegossip.models import footprint
from tests.helpers.waiting import until
from tests.test_footprint import FIXTURES, compile_model

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]


def test_an_agent_killed_at_its_boards_memory_limit_is_named_so(root_only, tmp_path):
    """The NumPy CNN at 4096 examples a step needs far more than a Pi Zero 2 W's 512 MB."""
    said = zero_2ws_failing(tmp_path, "--model", "cnn", "--batch", "4096")
    assert "killed by the kernel at its board's memory limit, 512 MB (peak" in said, said


def test_a_board_refuses_a_batch_its_memory_cannot_hold(root_only, tmp_path):
    """The torch-exported Fashion-MNIST CNN, measured by `model compile --batch`: at 2,048
    examples a step its line says well over 512 MB, so each Pi Zero 2 W's agent reads its
    board's memory group and refuses in one line, before it trains, instead of being killed."""
    model = tmp_path / "cnn"
    compile_model(FIXTURES / "onnx" / "fashion_cnn.onnx", model, "--batch", "64")
    need = footprint.read(model).at(2048)
    assert need > 600, need  # what makes the refusal certain, whatever this machine measured
    said = zero_2ws_failing(
        tmp_path, "--model", model, "--data", "fashion-mnist", "--batch", "2048"
    )
    assert "train.batch: training this model at batch 2048 needs about" in said, said
    assert "this device has 512 MB" in said, said


def zero_2ws_failing(tmp_path, *args) -> str:
    """Two Pi Zero 2 Ws at their boards' speed and memory, 30 s of `args`: the run fails, and
    its one line."""
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--devices", "2:pi-zero-2w"]
        + ["--device-scale", "1.0", "--duration", "30", "--out", str(tmp_path / "run")]
        + ["--json", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode != 0, p.stdout[-2000:]
    said = p.stderr.strip().splitlines()
    assert len(said) == 1, p.stderr[-3000:]
    return said[0]


def test_a_terminated_emulation_stops_its_agents_and_removes_its_namespaces(root_only, tmp_path):
    """SIGTERM (a job runner's, `timeout`'s) tears the fleet down as Ctrl-C does: the run
    says so in one line and exits INTERRUPTED, and no agent or namespace of it is left."""
    before = set(netns_names())
    out = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--nodes", "2"]
        + ["--model", "logreg", "--duration", "300", "--out", str(out), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(
            lambda: all(_stepped(out / f"agent{i}" / "metrics.jsonl") for i in (0, 1)),
            timeout=120,
            what="both agents training",
        )
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == exit_codes.INTERRUPTED, err
    assert err.strip().splitlines() == [
        "edgegossip: error: interrupted; agents stopped and namespaces removed"
    ], err
    assert set(netns_names()) <= before
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout
    assert left == "", left


def netns_names() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _stepped(path) -> bool:
    return path.is_file() and any("step" in r and r["step"] > 0 for r in read(path))
