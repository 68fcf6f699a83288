"""How an emulated fleet ends when it does not end well. Issue 68, item 1: an emulated board's
agent that the kernel kills at the board's memory limit is named as exactly that, in one line,
with the limit and the peak, and the run ends with an error."""

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]


def test_an_agent_killed_at_its_boards_memory_limit_is_named_so(root_only, tmp_path):
    """The NumPy CNN at 4096 examples a step needs far more than a Pi Zero 2 W's 512 MB."""
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--devices", "2:pi-zero-2w"]
        + ["--device-scale", "1.0", "--model", "cnn", "--batch", "4096", "--duration", "30"]
        + ["--out", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode != 0, p.stdout[-2000:]
    said = p.stderr.strip().splitlines()
    assert len(said) == 1, p.stderr[-3000:]
    assert "killed by the kernel at its board's memory limit, 512 MB (peak" in said[0], said
