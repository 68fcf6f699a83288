"""Issue 57, item 3: `emulate --devices 8:pi-zero-2w,4:pi4,4:pi5` makes a fleet of Raspberry
Pi boards, each device's CPU share and memory limit its board's (emulate/profiles.py: the ratios
from published HPL runs), as the kernel enforces them (a cgroup per device, emulate/cgroups.py);
`emulate --cpu NODES:SHARE` sets a device's share by hand. A fleet of boards at work:
tests/test_wifi.py."""

import subprocess
import sys

import pytest

from edgegossip.emulate import profiles
from edgegossip.run import cpu_shares


def test_a_fleet_of_boards_gets_each_boards_share_and_memory():
    names = profiles.devices("2:pi-zero-2w, 1:pi4,1:pi5")
    assert names == ("pi-zero-2w", "pi-zero-2w", "pi4", "pi5")
    boards = profiles.limits(names, 0.5, cores=2)
    # a Pi 5 gets the scale; the others their HPL ratio of it: 5.1 / 31.4 and 11.889 / 35.169
    assert [d.cpu for d in boards] == [0.0812, 0.0812, 0.169, 0.5]
    assert [d.memory_mb for d in boards] == [512, 512, 8192, 8192]
    assert [d.board for d in boards] == list(names)
    with pytest.raises(ValueError, match=r"add up to 2\.25 cores .* more than this machine's 2"):
        profiles.limits(("pi5",) * 9, 0.25, cores=2)  # the ratios would no longer hold
    with pytest.raises(ValueError, match="less than the kernel's least quota"):
        profiles.limits(("pi-zero-2w", "pi5"), 0.05, cores=2)
    for bad in ("8:pi3", "pi5", "0:pi5", "x:pi4", "4:pi5,"):
        with pytest.raises(ValueError, match=r"want COUNT:PROFILE,\.\.\. with PROFILE one of"):
            profiles.devices(bad)


def test_a_machine_without_the_controllers_is_told_at_the_start(tmp_path, monkeypatch):
    """No cgroup controller to cap devices with: one CgroupError from create(), where the
    fleet's start handles it (one line, exit 1), not from building the fleet."""
    from edgegossip.emulate import cgroups

    monkeypatch.setattr(cgroups, "ROOT", tmp_path)  # a hierarchy with no controller in it
    groups = cgroups.DeviceGroups("none", {0: 0.5}, {0: 512})
    with pytest.raises(cgroups.CgroupError, match="needs the cgroup cpu controller"):
        groups.create()
    groups.remove()


def test_devices_set_the_node_count_and_a_differing_one_is_refused(tmp_path):
    def emulate(*args):
        return subprocess.run(
            [sys.executable, "-m", "edgegossip.cli.app", "emulate", "--backend", "loopback"]
            + ["--duration", "5", "--out", str(tmp_path / "run"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    for args, said in (
        (("--devices", "2:pi5,1:pi4", "--nodes", "4"), "--devices 2:pi5,1:pi4 is 3 nodes"),
        (("--devices", "9:pi5"), "add up to 2.25 cores"),
        (("--device-scale", "0.5"), "--device-scale scales --devices"),
    ):
        p = emulate(*args)
        assert p.returncode == 2 and said in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert not (tmp_path / "run").exists()


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
def test_cleanup_removes_the_groups_a_killed_run_left(root_only):
    """A run stopped by a signal it cannot handle leaves its device groups, and the agents in
    them: `emulate --cleanup` stops those processes and removes the groups."""
    from edgegossip.emulate import cgroups

    groups = cgroups.DeviceGroups("cleanup-test", {0: 0.5}, {0: 256})
    groups.create()
    proc = subprocess.Popen(["sleep", "60"], preexec_fn=groups.joiner(0))
    try:
        removed = cgroups.cleanup()
        assert proc.wait(timeout=30) == -9
        assert all(not b.exists() for b in groups.bases.values()), removed
        assert sum("edgegossip-cleanup-test" in r for r in removed) == len(groups.bases)
    finally:
        proc.kill()
        groups.remove()
