"""A device's install, as docs/raspberry-pi.md and devices/cloud-init.yaml tell a Raspberry Pi owner to do
it: cloud-init's own modules write the files in their real order, and the installed copy runs
on its own once the source tree is gone, without the onnx extra."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
USER_DATA = REPO / "devices" / "cloud-init.yaml"
HARNESS = Path(__file__).parent / "helpers" / "cloud_init_stages.py"


def _need_cloud_init():
    if not Path("/usr/lib/python3/dist-packages/cloudinit").is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must install Debian's cloud-init (.ci/run does)")
        pytest.skip("Debian package cloud-init not installed")


def _cloud_init_stages(tmp_path: Path, user_data: str) -> dict:
    """Run the harness in a throw-away root: the host's root under an overlay in a private
    mount namespace, so useradd and chown there leave the host untouched."""
    stage = tmp_path / "harness"
    stage.mkdir()
    (stage / "user-data").write_text(user_data)
    shutil.copy(HARNESS, stage / "stages.py")
    script = f"""set -e
T=$(mktemp -d)
mount -t tmpfs tmpfs "$T"
mkdir "$T/u" "$T/w" "$T/r"
mount -t overlay overlay -o lowerdir=/,upperdir="$T/u",workdir="$T/w" "$T/r"
mount -t proc proc "$T/r/proc"
mount --rbind /dev "$T/r/dev"
mkdir "$T/r/harness"
cp {stage}/* "$T/r/harness/"
chroot "$T/r" /usr/bin/python3 /harness/stages.py /harness/user-data
"""
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_cloud_init_writes_agent_files_after_the_user_exists(tmp_path, root_only):
    _need_cloud_init()
    schema = subprocess.run(
        ["cloud-init", "schema", "--config-file", str(USER_DATA)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert schema.returncode == 0, schema.stdout + schema.stderr
    out = _cloud_init_stages(tmp_path, USER_DATA.read_text())
    assert (
        out["ran"].index("write-files")
        < out["ran"].index("users-groups")
        < out["ran"].index("write-files-deferred")
    )
    assert out["errors"] == {}
    assert out["files"]["/etc/edgegossip/agent.toml"] == {
        "owner": "root",
        "group": "edgegossip",
        "mode": "0o640",
    }
    assert out["files"]["/etc/sysctl.d/60-edgegossip.conf"] == {
        "owner": "root",
        "group": "root",
        "mode": "0o644",
    }
    assert subprocess.run(["id", "edgegossip"], capture_output=True).returncode != 0, (
        "the harness must not create the user on the host"
    )


def test_cloud_init_harness_catches_an_owner_written_too_early(tmp_path, root_only):
    _need_cloud_init()
    early = USER_DATA.read_text().replace("    defer: true\n", "")
    out = _cloud_init_stages(tmp_path, early)
    assert "Unknown user or group" in out["errors"]["write-files"]
    assert out["files"]["/etc/edgegossip/agent.toml"]["group"] == "root"


def _source_copy(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for f in filter(None, files):
        src = REPO / f.decode()
        if src.is_file():
            (dest / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f.decode())


@pytest.mark.timeout(900)
def test_installed_copy_runs_without_source_tree_or_onnx(tmp_path, mnist_data, free_udp_port):
    from edgegossip import paths

    src, prefix = tmp_path / "edgegossip-src", tmp_path / "opt" / "edgegossip"
    _source_copy(src)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["EDGEGOSSIP_BUILD_CACHE"] = str(paths.cache_dir() / "pyzmq")  # the wheel make built
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix)
    )
    p = subprocess.run(
        ["bash", str(src / "scripts" / "install-device.sh"), str(prefix)],
        capture_output=True,
        text=True,
        env=env,
        timeout=840,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    shutil.rmtree(src)

    bin_ = prefix / "venv" / "bin"
    where = subprocess.run(
        [
            bin_ / "python",
            "-c",
            "import edgegossip, edgegossip.kernels as k, "
            "zmq; print(edgegossip.__file__, k.IMPLEMENTATION, zmq.has('draft'))",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    path, impl, draft = where.stdout.split()
    # the index's binary pyzmq: nothing of it compiled (the draft build is --zmq-draft's)
    assert Path(path).is_relative_to(prefix) and impl == "cython" and draft == "False"
    assert (
        subprocess.run(
            [bin_ / "python", "-c", "import onnxruntime"], env=env, capture_output=True, timeout=60
        ).returncode
        != 0
    )

    env["EDGEGOSSIP_CACHE"] = str(paths.cache_dir())
    conf = tmp_path / "agent.toml"
    base = (
        f'[agent]\nid = 0\nlisten = "127.0.0.1:{free_udp_port()}"\noutput = "{tmp_path}/out"\n'
        '[train]\nalgorithm = "local"\nworkers = 1\nmodel = "logreg"\nmax_steps = 60\n'
        "eval_every = 30\n"
    )

    def agent(text: str, *args: str) -> subprocess.CompletedProcess:
        conf.write_text(text)
        return subprocess.run(
            [bin_ / "edgegossip", "agent", "--config", str(conf), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )

    run = agent(base, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["step"] == 60

    onnx = agent(base + 'backend = "onnx"\n')
    assert onnx.returncode == 2
    assert onnx.stderr.count("\n") == 1 and "edgegossip[onnx]" in onnx.stderr

    # the zmq transport without the draft build: one line, not a traceback
    zmq_run = agent(
        base.replace("[train]", '[net]\ntransport = "zmq"\n[train]')
        .replace('algorithm = "local"\nworkers = 1', "workers = 2")
        .replace(
            "[agent]\n", '[agent]\nkey = "install-test-fleet-secret"\npeers = ["1@127.0.0.1:9"]\n'
        )
    )
    assert zmq_run.returncode == 2 and zmq_run.stderr.count("\n") == 1, zmq_run.stderr
    assert "draft API" in zmq_run.stderr and "--zmq-draft" in zmq_run.stderr
