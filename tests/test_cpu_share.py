"""Issue 57, item 3, the mechanism: `emulate --cpu NODES:SHARE` gives devices a share of this
machine's CPU as the kernel enforces it (a cgroup per capped device, emulate/cgroups.py), so a
slow device trains beside fast ones. Named Raspberry Pi profiles are not here: they need a
published training-like benchmark of the boards to set their ratios from."""

import json
import subprocess
import sys

import pytest

from edgegossip.run import cpu_shares


def test_cpu_shares_are_read_per_node_and_a_bad_one_is_named():
    assert cpu_shares(("all:0.5", "3:0.1"), 4) == ((0, 0.5), (1, 0.5), (2, 0.5), (3, 0.1))
    assert cpu_shares(("0-1:2",), 3) == ((0, 2.0), (1, 2.0))
    for bad in ("4:0.5", "1:0", "x:0.5", "2-1:0.5", "0.5", "1:lots"):
        with pytest.raises(ValueError) as e:
            cpu_shares((bad,), 4)
        assert str(e.value).startswith(f"--cpu {bad}: want NODES:SHARE") and "\n" not in str(
            e.value
        )


@pytest.mark.root
def test_a_device_with_a_fifth_of_a_core_trains_that_much_slower(root_only, tmp_path, mnist_data):
    """Two local-only agents on loopback, 10 s, node 1 held to 0.2 cores by its quota (its
    start-up too: about 3 s of that at this share): it makes a fraction of node 0's steps
    (node 0 has half a core at least, on a busy machine), the kernel says it throttled it, and
    the run's groups are gone afterwards."""
    from edgegossip.emulate import cgroups

    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--nodes", "2"]
        + ["--backend", "loopback", "--algorithm", "local", "--model", "logreg"]
        + ["--duration", "10", "--cpu", "1:0.2", "--out", str(tmp_path / "run"), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    fast, slow = json.loads(p.stdout)["agents"]
    assert (fast["cpu_share"], slow["cpu_share"]) == (None, 0.2)
    assert slow["cpu_throttled_s"] > 0.5 and fast["cpu_throttled_s"] is None
    assert 0 < slow["steps"] < 0.6 * fast["steps"], (slow["steps"], fast["steps"])
    base = cgroups._base("x").parent
    assert not [d for d in base.iterdir() if d.name.startswith("edgegossip-")]
