"""The fleet commands end to end against a lab of booted Debian containers (root, CI): lab up ->
deploy -> status -> set p=1/16 (rolling) -> an agent killed -> status shows it down -> start ->
it resumes -> collect (the average of the README's own model, exported by its one-liner with
the weights in net.onnx.data and compiled, >= 0.85 on the test set, written back into its ONNX
file, which stock onnxruntime runs) -> lab down leaves nothing. And
the ways it must fail: unreachable host, wrong SSH key, full disk, a control key not allowed."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.onnx_models import compile_to
from tests.helpers.waiting import until

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(900)]


def eg(*args, timeout=600, check=True):
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    if check and p.returncode != 0:
        raise AssertionError(
            f"edgegossip {' '.join(args)}: exit {p.returncode}\n{p.stderr[-3000:]}"
        )
    return p


def js(*args, **kw):
    p = eg(*args, "--json", **kw)
    return json.loads(p.stdout)


def status(lab, *extra):
    return {r["name"]: r for r in js("fleet", "status", "--fleet", str(lab), *extra)["devices"]}


def on_device(lab, name, command, check=True):
    from edgegossip.fleet import inventory
    from edgegossip.fleet.ssh import Ssh

    f = inventory.load(lab)
    return Ssh(f, f.device(name)).run(command, check=check, timeout=60)


def leftovers():
    nets = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    procs = subprocess.run(
        ["pgrep", "-f", "systemd-nspawn.*egl"], capture_output=True, text=True
    ).stdout
    import re

    return re.findall(r"\begl\d+\w*", nets) + re.findall(r"\begl\d+h\b", links) + procs.split()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, root_only_module):
    out = tmp_path_factory.mktemp("lab") / "fleet"
    # the fleet trains a compiled model (issues 43, 55): the README's Net as its export
    # one-liner writes it (scripts/make-onnx-fixtures.py), compiled here, copied into the
    # fleet folder and shipped by deploy with onnxruntime
    model = tmp_path_factory.mktemp("model")
    readme = Path(__file__).parent / "fixtures" / "readme" / "net.onnx"
    assert readme.with_suffix(".onnx.data").is_file()  # the weights beside the graph
    compiled = compile_to(readme, model / "compiled")
    before = set(leftovers())
    try:
        up = js(
            "lab",
            "up",
            "--devices",
            "3",
            "--loss",
            "0.1",
            "--model",
            str(compiled),
            "--out",
            str(out),
            timeout=600,
        )
        assert len(up["devices"]) == 3
        yield out
    finally:
        eg("lab", "down", str(out), check=False)
        assert set(leftovers()) <= before, f"lab down left {set(leftovers()) - before}"


@pytest.fixture(scope="module")
def root_only_module():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("root-only test reached CI without root")
        pytest.skip("needs root (network namespaces, systemd-nspawn)")


def test_fleet_end_to_end(lab, tmp_path):
    t0 = time.monotonic()
    dep = js("fleet", "deploy", "--fleet", str(lab), "--batch", "2", timeout=900)
    deploy_s = time.monotonic() - t0
    rows = dep["devices"]
    assert [r["ok"] for r in rows] == [True] * 3, rows
    assert all(
        r["state"] == "training" and r["version_after"] and r["release_after"] == dep["release"]
        for r in rows
    ), rows
    print(f"deploy of 3 lab devices took {deploy_s:.1f} s")

    again = js(
        "fleet", "deploy", "--fleet", str(lab), timeout=600
    )  # idempotent: nothing shipped twice
    assert all(
        r["ok"] and r["changed"] is False and r["shipped_mb"] < 1 for r in again["devices"]
    ), again

    st = until(
        lambda: (
            (s := status(lab))
            and all(r["state"] == "training" and r["step"] for r in s.values())
            and s
        ),
        timeout=90,
        what="three agents training",
        every=1,
    )
    assert all(r["source"] == "control" and r["reachable"] for r in st.values())
    from edgegossip import artifact

    digest = artifact.read(lab / "model").digest
    assert all(r["model_digest"] == digest and not r["model_mismatch"] for r in st.values()), st

    peers_change_without_restart(lab)
    closing_and_back_without_restart(lab)

    res = js("fleet", "set", "p=1/16", "--fleet", str(lab), timeout=600)
    assert all(r["ok"] for r in res["devices"]) and res["changes"] == {"p": 0.0625}
    assert "p = 0.0625" in (lab / "fleet.toml").read_text()
    hashes = {r["name"]: r["config_hash"] for r in res["devices"]}
    st = status(lab)
    assert {n: r["config_hash"] for n, r in st.items()} == hashes
    assert (
        "p = 0.0625"
        in on_device(
            lab, "lab" + lab_id(lab) + "-0", "cat /etc/edgegossip/agent.toml"
        ).stdout.decode()
    )

    victim = sorted(st)[1]
    # the last good checkpoint: the one the rolling restart above wrote at its stop
    step_before = status(lab, "--only", victim)[victim]["checkpoint_step"]
    assert step_before, "no checkpoint to resume from"
    on_device(
        lab,
        victim,
        "bash -c 'systemctl kill -s KILL edgegossip-agent; sleep 1; systemctl stop edgegossip-agent'",
        check=False,
    )
    st = status(lab)
    assert st[victim]["state"] in ("stopped", "failed") and st[victim]["source"] == "ssh", st[
        victim
    ]
    assert all(st[n]["state"] == "training" for n in st if n != victim)
    assert js("fleet", "start", "--fleet", str(lab), "--only", victim)["devices"][0]["ok"]
    back = until(
        lambda: (r := status(lab, "--only", victim)[victim])["state"] == "training" and r,
        timeout=90,
        what="the restarted agent",
        every=1,
    )
    assert back["step"] >= step_before, "the agent did not resume from its checkpoint"

    until(  # the restarted one caught up with the fleet: its own held-out accuracy
        lambda: (
            (r := status(lab, "--only", victim)[victim])["accuracy"] is not None
            and r["step"] > back["step"]
            and r["accuracy"] >= 0.85
        ),
        timeout=120,
        what="the restarted agent's held-out accuracy at 0.85",
        every=1,
    )
    out = tmp_path / "collected"
    col = js(
        "fleet",
        "collect",
        "--fleet",
        str(lab),
        "--out",
        str(out),
        "--live",
        "--test",
        "mnist",
        timeout=600,
    )
    assert col["average_model_accuracy"] >= 0.85, col
    assert Path(col["onnx"]).is_file() and (out / "summary.json").is_file()
    # the user's own model with the averaged parameters, in stock onnxruntime
    import onnxruntime as ort

    from edgegossip.data import mnist

    test = mnist.load()
    s = ort.InferenceSession(col["onnx"], providers=["CPUExecutionProvider"])
    x = test.x_test.reshape(-1, 1, 28, 28)
    acc = float((s.run(None, {"x": x})[0].argmax(1) == test.y_test).mean())
    assert abs(acc - col["average_model_accuracy"]) < 1e-3, (acc, col["average_model_accuracy"])
    assert Path(col["report"]).is_file() and all(Path(p).is_file() for p in col["plots"])
    html = Path(col["report"]).read_text()
    assert all(name in html for name in st)  # rows by device name, not agent id
    assert all(r["ok"] and r["accuracy"] > 0.8 and r["step"] > 0 for r in col["devices"]), col[
        "devices"
    ]
    starts = [
        json.loads(line)
        for line in (out / f"agent{sorted(st).index(victim)}" / "metrics.jsonl")
        .read_text()
        .splitlines()
        if '"start"' in line
    ]
    assert starts[-1]["resumed"] is True

    logs = eg("fleet", "logs", victim, "--fleet", str(lab), "--lines", "20").stdout
    assert "edgegossip" in logs


def peers_change_without_restart(lab: Path) -> None:
    """Issue 45: `fleet remove` and a deploy, then the device back and a deploy: the others
    get their new configs and link keys and reload them (systemctl reload, SIGHUP), taking the
    change of peers while they train: no restart (uptime goes on), a `peers` record each."""
    inventory = (lab / "fleet.toml").read_text()
    names = sorted(status(lab))
    gone, kept = names[-1], names[:-1]
    before = status(lab)
    t0 = time.monotonic()
    try:
        eg("fleet", "remove", gone, "--fleet", str(lab))
        dep = js("fleet", "deploy", "--fleet", str(lab), timeout=600)
        assert [(r["name"], r["changed"], r["state"]) for r in dep["devices"]] == [
            (n, True, "training") for n in kept
        ], dep
    finally:
        (lab / "fleet.toml").write_text(inventory)  # the device back, as `fleet add` would
    dep = js("fleet", "deploy", "--fleet", str(lab), timeout=600)
    changed = {r["name"]: r["changed"] for r in dep["devices"]}
    assert changed == {**dict.fromkeys(kept, True), gone: False}, dep
    after = status(lab)
    for n in kept:
        assert after[n]["uptime_s"] >= before[n]["uptime_s"] + time.monotonic() - t0 - 5, n
        peers = on_device(
            lab, n, 'grep -h \'"event": "peers"\' /var/lib/edgegossip/out/metrics.jsonl'
        ).stdout.decode()
        seen = [json.loads(line)["peers"] for line in peers.splitlines()][-2:]
        assert len(seen) == 2 and len(seen[0]) == 1 and len(seen[1]) == 2, (n, seen)


def closing_and_back_without_restart(lab: Path) -> None:
    """Issue 57: `fleet set phase=closing` reloads every device (a phase is taken live), so each
    is closing with its uptime going on; `fleet set phase=train` brings them back training."""
    before, t0 = status(lab), time.monotonic()
    res = js("fleet", "set", "phase=closing", "--fleet", str(lab), timeout=600)
    assert all(r["ok"] and r["state"] == "closing" for r in res["devices"]), res
    after = status(lab)
    for n, row in after.items():
        assert row["uptime_s"] >= before[n]["uptime_s"] + time.monotonic() - t0 - 5, (n, row)
    res = js("fleet", "set", "phase=train", "--fleet", str(lab), timeout=600)
    assert all(r["ok"] and r["state"] == "training" for r in res["devices"]), res


def test_a_real_prometheus_scrapes_the_lab_through_file_sd(lab, tmp_path, free_tcp_port):
    """Debian's Prometheus, started here on loopback, finds the deployed devices through the
    file_sd list `fleet prometheus` writes, and a query for held-out accuracy gives one series
    per device, each labelled with its device name and the fleet."""
    import urllib.parse
    import urllib.request

    exe = shutil.which("prometheus")
    assert exe, "prometheus is not installed: bash scripts/system-packages.sh install test"
    sd = tmp_path / "targets.json"
    got = js("fleet", "prometheus", "--fleet", str(lab), "--out", str(sd))
    assert len(got["targets"]) == 3 and json.loads(sd.read_text()) == got["targets"]
    from edgegossip.fleet import inventory
    from edgegossip.fleet import prometheus as fleet_prometheus

    conf = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [fleet_prometheus.scrape_config(sd, interval_s=1)],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(conf))  # JSON is YAML
    port = free_tcp_port()
    p = subprocess.Popen(
        [
            exe,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "w"),
    )

    def query(q):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())["data"]["result"]
        except OSError:
            return None

    try:
        result = until(
            lambda: (r := query("edgegossip_heldout_accuracy_ratio")) and len(r) == 3 and r,
            timeout=90,
            what="three series of held-out accuracy",
            every=1,
        )
        names = sorted(d.name for d in inventory.load(lab).devices)
        assert sorted(s["metric"]["device"] for s in result) == names
        assert {s["metric"]["fleet"] for s in result} == {f"lab{lab_id(lab)}"}
        assert all(0 <= float(s["value"][1]) <= 1 for s in result)
        up = query('up{job="edgegossip"}')
        assert len(up) == 3 and all(s["value"][1] == "1" for s in up), up
    finally:
        p.terminate()
        p.wait(timeout=30)


def lab_id(lab: Path) -> str:
    return str(json.loads((lab / "lab.json").read_text())["lab"])


def _copy_fleet(lab: Path, dest: Path) -> Path:
    shutil.copytree(
        lab, dest, ignore=shutil.ignore_patterns("wheelhouse", "data", "lab", "collected")
    )
    return dest


def test_unreachable_device_and_wrong_ssh_key_are_rows(lab, tmp_path):
    f2 = _copy_fleet(lab, tmp_path / "f2")
    eg("fleet", "add", "ghost", f"10.78.{lab_id(lab)}.99", "--user", "root", "--fleet", str(f2))
    t = time.monotonic()
    p = eg("fleet", "status", "--fleet", str(f2), "--json", "--timeout", "20", check=False)
    rows = {r["name"]: r for r in json.loads(p.stdout)["devices"]}
    assert rows["ghost"]["state"] == "unreachable" and rows["ghost"]["reachable"] is False
    assert "unreachable" in rows["ghost"]["error"] and time.monotonic() - t < 40
    assert sum(r["state"] == "training" for r in rows.values()) == 3
    p = eg("fleet", "start", "--fleet", str(f2), "--only", "ghost", check=False)
    assert p.returncode == 1 and "ghost" in p.stdout and "unreachable" in p.stdout

    # a key the devices never authorised: every device is a one-line "SSH key refused" row
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True
    )
    text = (
        (f2 / "fleet.toml")
        .read_text()
        .replace('ssh_key = "secrets/ssh/id_ed25519"', f'ssh_key = "{tmp_path / "k"}"')
    )
    (f2 / "fleet.toml").write_text(text)
    p = eg("fleet", "restart", "--fleet", str(f2), "--only", "lab", "--json", check=False)
    assert p.returncode == 1
    rows = json.loads(p.stdout)["devices"]
    assert all(
        not r["ok"] and r["error"].startswith("SSH key refused") and "\n" not in r["error"]
        for r in rows
    )
    assert all(r["state"] == "training" for r in status(lab).values())  # nothing was restarted


def test_control_key_not_allowed_gets_no_answer(lab, tmp_path):
    import zmq.auth

    f3 = _copy_fleet(lab, tmp_path / "f3")
    ctl = f3 / "secrets" / "control"
    for name in ("client.key", "client.key_secret"):
        (ctl / name).unlink()
    zmq.auth.create_certificates(str(ctl), "client")  # a stranger's key pair
    rows = {r["name"]: r for r in js("fleet", "status", "--fleet", str(f3))["devices"]}
    assert all(r["source"] == "ssh" and "allow-listed" in r["control_error"] for r in rows.values())
    assert all(r["state"] == "training" for r in status(lab).values())


def test_an_unpinned_host_key_is_refused_until_its_fingerprint_is_trusted(lab, tmp_path):
    """Issue 21, item 2: with no key pinned, a device is not trusted on first contact; `fleet
    trust` pins the one whose fingerprint the operator confirmed, and only that one."""
    f4 = _copy_fleet(lab, tmp_path / "f4")
    (f4 / "secrets" / "known_hosts").write_text("")
    name = f"lab{lab_id(lab)}-0"
    p = eg("fleet", "restart", "--fleet", str(f4), "--only", name, "--json", check=False)
    row = json.loads(p.stdout)["devices"][0]
    assert p.returncode == 1 and row["error"].startswith("no host key pinned"), row
    p = eg("fleet", "trust", name, "--fleet", str(f4), check=False)
    assert (
        p.returncode == 1
        and "SHA256:" in p.stdout
        and (f4 / "secrets" / "known_hosts").read_text() == ""
    )
    pub = (lab / "lab" / name / "hostkeys" / "ssh_host_ed25519_key.pub").read_text()
    fp = subprocess.run(
        ["ssh-keygen", "-lf", "-"], input=pub, capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert js("fleet", "trust", name, "--fleet", str(f4), "--fingerprint", fp)["pinned"] == fp
    res = js("fleet", "restart", "--fleet", str(f4), "--only", name)
    assert res["devices"][0]["ok"], res
    until(
        lambda: status(lab, "--only", name)[name]["state"] == "training",
        timeout=90,
        what="the restarted agent",
        every=1,
    )


def test_a_passphrase_protected_key_is_used_through_ssh_agent(lab, tmp_path, monkeypatch):
    """Issue 21, item 11: the fleet's SSH key is root on every device; it may carry a
    passphrase, and the fleet commands then use it through the operator's ssh-agent. Without
    the agent the row says what to do."""
    f5 = _copy_fleet(lab, tmp_path / "f5")
    name = f"lab{lab_id(lab)}-0"
    key = tmp_path / "protected"
    secret = "a passphrase long enough"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", secret, "-f", str(key)], check=True)
    keys = lab / "lab" / name / "authorized_keys"
    keys.write_text(keys.read_text() + key.with_suffix(".pub").read_text())
    text = (f5 / "fleet.toml").read_text()
    (f5 / "fleet.toml").write_text(
        text.replace('ssh_key = "secrets/ssh/id_ed25519"', f'ssh_key = "{key}"')
    )
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    p = eg("fleet", "restart", "--fleet", str(f5), "--only", name, "--json", check=False)
    row = json.loads(p.stdout)["devices"][0]
    assert p.returncode == 1 and "has a passphrase" in row["error"] and "ssh-add" in row["error"]
    agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    env = dict(re.findall(r"(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]+);", agent))
    askpass = tmp_path / "askpass"
    askpass.write_text(f"#!/bin/sh\necho '{secret}'\n")
    askpass.chmod(0o700)
    try:
        subprocess.run(
            ["ssh-add", str(key)],
            env={**os.environ, **env, "SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
            timeout=30,
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", env["SSH_AUTH_SOCK"])
        res = js("fleet", "restart", "--fleet", str(f5), "--only", name)
        assert res["devices"][0]["ok"], res
    finally:
        os.kill(int(env["SSH_AGENT_PID"]), 15)
    until(
        lambda: status(lab, "--only", name)[name]["state"] == "training",
        timeout=90,
        what="the restarted agent",
        every=1,
    )


def test_full_disk_fails_that_device_only_and_changes_nothing(lab):
    name = f"lab{lab_id(lab)}-2"
    before = status(lab, "--only", name)[name]
    on_device(lab, name, "bash -c 'mkdir -p /tmp/full && mount -t tmpfs -o size=8m tmpfs /opt'")
    try:
        p = eg("fleet", "deploy", "--fleet", str(lab), "--json", check=False, timeout=600)
        rows = {r["name"]: r for r in json.loads(p.stdout)["devices"]}
        assert p.returncode == 1
        assert not rows[name]["ok"] and rows[name]["error"].startswith("disk full"), rows[name]
        assert all(r["ok"] for n, r in rows.items() if n != name)
        after = status(lab, "--only", name)[name]
        assert after["state"] == "training" and after["config_hash"] == before["config_hash"]
        assert after["uptime_s"] > before["uptime_s"]  # not restarted
    finally:
        on_device(lab, name, "umount /opt", check=False)


def test_the_unit_is_confined_and_deploy_follows_no_link_in_the_state_folder(lab):
    """Issue 21, items 9 and 11. The state folder as the agent's user could leave it before
    (owning /var/lib/edgegossip, with data/ a link to a root-only folder and a planted
    cache/mnist.npz.new link): a deploy leaves the link's target as it was and makes the state
    folder root's again, after which the agent's user cannot plant anything there. And the unit
    rates at most 3.0 by `systemd-analyze security` with the agent still training under it."""
    name = f"lab{lab_id(lab)}-1"
    plant = (
        "bash -c 'set -e; install -d -m 0700 /root/victim; echo x > /root/victim/file; "
        "chown edgegossip /var/lib/edgegossip /var/lib/edgegossip/cache; "
        "rm -rf /var/lib/edgegossip/data; ln -s /root/victim /var/lib/edgegossip/data; "
        "ln -s /root/victim/file /var/lib/edgegossip/cache/planted.new'"
    )
    on_device(lab, name, plant)
    dep = js("fleet", "deploy", "--fleet", str(lab), "--only", name, timeout=600)
    assert dep["devices"][0]["ok"], dep
    look = on_device(
        lab,
        name,
        "stat -c '%U:%G %a %F' /root/victim /root/victim/file /var/lib/edgegossip "
        "/var/lib/edgegossip/data /var/lib/edgegossip/data/device.npz",
    ).stdout.decode()
    assert look.split("\n")[:5] == [
        "root:root 700 directory",
        "root:root 644 regular file",
        "root:root 755 directory",
        "root:edgegossip 750 directory",
        "root:edgegossip 640 regular file",
    ], look
    planted = on_device(
        lab, name, "runuser -u edgegossip -- ln -s /etc /var/lib/edgegossip/data2", check=False
    )
    assert planted.returncode != 0
    st = until(
        lambda: (r := status(lab, "--only", name)[name])["state"] == "training" and r,
        timeout=90,
        what="the agent training again",
        every=1,
    )
    assert st["step"] > 0
    rating = on_device(
        lab, name, "systemd-analyze security --no-pager edgegossip-agent.service"
    ).stdout.decode()
    import re

    level = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", rating).group(1))
    print(f"systemd-analyze security on a lab device: {level}")
    assert level <= 3.0, rating[-2000:]


def test_flashed_first_boot_provisions_a_fresh_device(tmp_path):
    """`fleet flash --format firstrun` into a boot folder, that folder as a fresh lab device's
    /boot/firmware, the script run as systemd would run it: the agent comes up training, and the
    bundle with its secrets is gone from the boot partition."""
    out = tmp_path / "lab1"
    try:
        js(
            "lab",
            "up",
            "--devices",
            "1",
            "--algorithm",
            "local",
            "--split",
            "none",
            "--out",
            str(out),
        )
        js("fleet", "wheelhouse", "--out", str(out / "wheelhouse"))
        names = sorted(status(out))
        # a lab device is this machine's kind, not a Pi: its boot folder carries no Pi's
        # marker, so it names its target (issue 46)
        boot = tmp_path / "bootfs"
        boot.mkdir()
        (boot / "cmdline.txt").write_text("console=tty1 root=/dev/vda2 rootfstype=ext4 rootwait\n")
        row = js(
            "fleet",
            "flash",
            names[0],
            "--fleet",
            str(out),
            "--boot",
            str(boot),
            "--format",
            "firstrun",
            "--target",
            "this-machine",
        )
        assert row["format"] == "firstrun" and row["named_target"] == "this-machine"
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            t.add(str(boot), arcname=".")
        on_device_input(
            out,
            names[0],
            "bash -c 'mkdir -p /boot/firmware && tar -x -C /boot/firmware'",
            buf.getvalue(),
        )
        run = on_device(out, names[0], "bash /boot/firmware/firstrun.sh", check=False)
        assert run.returncode == 0, run.stderr.decode()[-2000:]
        left = on_device(
            out,
            names[0],
            "bash -c 'ls /boot/firmware; cat /boot/firmware/cmdline.txt; "
            "cat /etc/hostname; systemctl is-enabled edgegossip-agent'",
        ).stdout.decode()
        assert "edgegossip" not in left.split("\n")[:5] and "firstrun.sh" not in left
        assert "systemd.run" not in left and names[0] in left and "enabled" in left
        on_device(out, names[0], "systemctl start edgegossip-agent")  # what the reboot does
        st = until(
            lambda: (r := status(out, "--only", names[0])[names[0]])["state"] == "training" and r,
            timeout=90,
            what="the flashed device's agent",
            every=1,
        )
        assert st["source"] == "control"
    finally:
        eg("lab", "down", str(out), check=False)


def on_device_input(lab, name, command, data: bytes):
    from edgegossip.fleet import inventory
    from edgegossip.fleet.ssh import Ssh

    f = inventory.load(lab)
    return Ssh(f, f.device(name)).run(command, input=data, timeout=120)
