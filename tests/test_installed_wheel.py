"""A pip-installed edgegossip manages a fleet (root, CI): the wheel is built, installed into a fresh
venv, and the fleet commands run with the source tree hidden (a tmpfs over it, in a mount
namespace of their own): init with a profile, wheelhouse (the installed package repacked, pyzmq
from the index), flash into a boot folder, lab up, deploy, status."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers.waiting import until

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("root-only test reached CI without root")
        pytest.skip("needs root (a mount namespace, the lab)")
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next((tmp / "dist").glob("edgegossip-*.whl"))
    venv = tmp / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=120)
    p = subprocess.run(
        [venv / "bin" / "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return venv


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)
    )
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def hidden(cmd: list) -> list:
    """cmd in a mount namespace where the checkout is an empty tmpfs (slave: the host's mounts
    reach in, the tmpfs does not leak out)."""
    return [
        "unshare",
        "-m",
        "--propagation",
        "slave",
        "sh",
        "-c",
        'mount -t tmpfs -o size=1m none "$0" && exec "$@"',
        str(REPO),
        *cmd,
    ]


def eg(venv: Path, cwd: Path, *args, hide_source=True, timeout=600):
    """The installed CLI; with hide_source, in a mount namespace where the checkout is empty."""
    cmd = [str(venv / "bin" / "edgegossip"), *args]
    if hide_source:
        cmd = hidden(cmd)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=cwd)
    assert p.returncode == 0, (
        f"edgegossip {' '.join(args)}: exit {p.returncode}\n{p.stderr[-3000:]}"
    )
    return json.loads(p.stdout) if "--json" in args else p


def test_installed_package_does_not_reach_into_a_checkout(installed, tmp_path):
    p = subprocess.run(
        hidden(
            [
                str(installed / "bin" / "python"),
                "-c",
                "import edgegossip, edgegossip.paths as p; print(edgegossip.__file__); "
                "print(p.devices_dir()); print(p.source_tree())",
            ]
        ),
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
        timeout=60,
    )
    where, devices, source = p.stdout.split()
    assert Path(where).is_relative_to(installed) and Path(devices).is_relative_to(installed)
    assert source == "None" and (Path(devices) / "profiles" / "raspberry-pi-4.toml").is_file()


def test_fleet_commands_from_an_installed_wheel(installed, tmp_path, mnist_data):
    # init with a profile: the profile's settings reach the device's config
    made = eg(
        installed,
        tmp_path,
        "fleet",
        "init",
        str(tmp_path / "pis"),
        "--devices",
        "2",
        "--profile",
        "raspberry-pi-zero-2w",
        "--model",
        "logreg",
        "--json",
    )
    assert [d["name"] for d in made["devices"]] == ["dev-0", "dev-1"]
    text = (tmp_path / "pis" / "fleet.toml").read_text()
    assert 'profile = "raspberry-pi-zero-2w"' in text

    # the wheelhouse: the installed edgegossip repacked, everything else binary from the index
    wh = tmp_path / "wheelhouse"
    m = eg(installed, tmp_path, "fleet", "wheelhouse", "--out", str(wh), "--json")
    names = m["wheels"]
    assert any(n.startswith("edgegossip-") for n in names) and any(
        n.startswith("pyzmq-") for n in names
    )
    assert all((wh / n).is_file() for n in names)

    # flash into a boot folder: the profile, the unit and the bundle come from the package
    boot = tmp_path / "bootfs"
    boot.mkdir()
    # not a Pi's boot folder (this wheelhouse is x86): it names its target (issue 46)
    (boot / "cmdline.txt").write_text("console=tty1 root=/dev/vda2 rootfstype=ext4 rootwait\n")
    row = eg(
        installed,
        tmp_path,
        "fleet",
        "flash",
        "dev-0",
        "--fleet",
        str(tmp_path / "pis"),
        "--boot",
        str(boot),
        "--format",
        "cloud-init",
        "--target",
        "this-machine",
        "--wheelhouse",
        str(wh),
        "--json",
    )
    assert row["format"] == "cloud-init"
    conf = tomllib.loads((boot / "edgegossip" / "agent.toml").read_text())
    assert conf["net"]["rate_mbps"] == 5  # from the profile (the fleet's default is 20)
    unit = (boot / "edgegossip" / "edgegossip-agent.service").read_bytes()
    assert b"ExecStart=/opt/edgegossip/venv/bin/edgegossip agent" in unit

    # a lab, deployed from that wheelhouse, trains
    lab = tmp_path / "lab"
    eg(
        installed,
        tmp_path,
        "lab",
        "up",
        "--devices",
        "2",
        "--model",
        "logreg",
        "--out",
        str(lab),
        "--json",
        hide_source=False,
    )
    try:
        dep = eg(
            installed,
            tmp_path,
            "fleet",
            "deploy",
            "--fleet",
            str(lab),
            "--wheelhouse",
            str(wh),
            "--json",
            timeout=900,
        )
        assert [r["ok"] for r in dep["devices"]] == [True, True], dep
        st = until(
            lambda: (
                (s := eg(installed, tmp_path, "fleet", "status", "--fleet", str(lab), "--json"))
                and all(r["state"] == "training" and r["step"] for r in s["devices"])
                and s
            ),
            timeout=90,
            what="two agents training",
            every=2,
        )
        assert len(st["devices"]) == 2
    finally:
        subprocess.run(
            [installed / "bin" / "edgegossip", "lab", "down", str(lab)],
            capture_output=True,
            timeout=300,
            env=_env(),
        )
