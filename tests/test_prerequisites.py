"""The one list of system packages (scripts/system-packages.sh), proven from scratch: its install
step, run inside a bare Debian root, brings every command the demo and the tests call. A package
installed by hand on a developer's machine cannot hide a gap here."""

import subprocess
from pathlib import Path

import pytest

from edgegossip import tools
from tests.helpers import bare_root

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "system-packages.sh"


def _table(group: str) -> list[list[str]]:
    out = subprocess.run(
        ["bash", str(SCRIPT), "list", group], capture_output=True, text=True, check=True
    ).stdout
    return [ln.split(None, 3) for ln in out.splitlines() if ln.strip()]


def test_every_tool_the_code_names_is_on_the_install_list():
    """edgegossip/tools.py says which package brings each command the code runs; each of those
    packages must be on the list the install step installs."""
    listed = {row[1] for row in _table("test")}
    assert set(tools.PACKAGES.values()) <= listed, set(tools.PACKAGES.values()) - listed


def test_groups_include_each_other():
    names = {g: {row[1] for row in _table(g)} for g in ("build", "demo", "test")}
    assert names["build"] < names["demo"] < names["test"]
    assert {"iproute2", "nftables"} <= names["demo"]


def test_a_missing_tool_names_its_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(
        tools.MissingTool, match=r"nft not found .*install the Debian package nftables"
    ):
        tools.require("nft", why="network emulation")


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_install_step_brings_every_command_into_a_bare_debian_root(root_only, tmp_path):
    base = bare_root.ensure()
    with bare_root.overlay(base, tmp_path) as top:
        (top / "tmp/system-packages.sh").write_bytes(SCRIPT.read_bytes())

        def chroot(*cmd: str, timeout: float = 60) -> subprocess.CompletedProcess:
            return subprocess.run(
                ["chroot", str(top), *cmd],
                capture_output=True,
                text=True,
                timeout=timeout,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"},
            )

        before = chroot("bash", "/tmp/system-packages.sh", "missing", "test").stdout.split()
        assert {"nftables", "iptables", "podman"} <= set(before), before  # really bare
        inst = chroot("bash", "/tmp/system-packages.sh", "install", "test", timeout=1200)
        assert inst.returncode == 0, inst.stdout[-2000:] + inst.stderr[-2000:]
        after = chroot("bash", "/tmp/system-packages.sh", "missing", "test").stdout.split()
        assert after == [], after
        commands = {
            *tools.PACKAGES,
            *chroot("bash", "/tmp/system-packages.sh", "commands", "test").stdout.split(),
        }
        absent = [
            c
            for c in sorted(commands)
            if chroot("sh", "-c", f"command -v {c} || test -e {c}").returncode != 0
        ]
        assert absent == [], f"not present after the install step: {absent}"
