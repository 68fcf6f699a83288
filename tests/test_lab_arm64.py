"""Arm64 lab devices: the Debian of 64-bit Raspberry Pi OS Trixie on aarch64, booted by
systemd-nspawn under qemu-user. What CI runs of them: two devices come up with systemd running
and sshd answering, the fleet's commands reach them through sudo, they report the platform a
Pi of that release has, and a deploy of this machine's own wheelhouse is refused with exit 2
before anything is sent. The rest of the path (`fleet wheelhouse --for trixie-arm64`, whose
compile under emulation takes minutes, deploy, training, collect) is scripts/check-arm64-lab.sh.

The root is built at the start of the session, in the background at the lowest priority
(conftest.py), so its minutes under emulation overlap the tests before this one."""

from __future__ import annotations

import pytest

from tests.test_fleet_lab import eg, js, on_device, status

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_arm64_trixie_devices_boot_and_refuse_this_machines_wheelhouse(
    root_only, tmp_path, arm64_trixie_root
):
    out = tmp_path / "lab"
    try:
        up = js(
            "lab",
            "up",
            "--devices",
            "2",
            "--arch",
            "arm64",
            "--os",
            "trixie",
            "--model",
            "logreg",
            "--out",
            str(out),
            timeout=900,
        )
        assert (up["os"], up["arch"], len(up["devices"])) == ("trixie", "arm64", 2), up
        names = [d["name"] for d in up["devices"]]
        # the boot itself, and what the fleet's commands need of it, active; "degraded" (a unit
        # failed) was seen once in CI under load and not here: its failed units are printed
        essentials = "ssh dbus systemd-journald systemd-logind"
        probe = (
            "sudo -n sh -c 'uname -m; systemctl is-system-running; "
            'python3 -c "import platform, sys; '
            'print(sys.version_info[0], sys.version_info[1], platform.libc_ver()[1])"; '
            f"echo $(systemctl is-active {essentials} | sort -u); "
            "systemctl --failed --plain --no-legend --no-pager'"
        )
        for name in names:
            said = on_device(out, name, probe).stdout.decode().split("\n")
            assert said[0] == "aarch64" and said[2] == "3 13 2.41", said
            assert said[1] in ("running", "degraded") and said[3] == "active", said
            if said[1] != "running":
                print(f"{name} degraded, failed units: {said[4:]}")
        rows = status(out)
        assert set(rows) == set(names)
        assert all(r["ok"] and r["state"] == "stopped" for r in rows.values()), (
            rows
        )  # none installed
        # this machine's wheelhouse (x86_64, Python 3.11): every device refuses it, exit 2
        eg("fleet", "wheelhouse", "--out", str(out / "wheelhouse"))
        p = eg(
            "fleet",
            "deploy",
            "--fleet",
            str(out),
            "--wheelhouse",
            str(out / "wheelhouse"),
            "--json",
            check=False,
        )
        assert p.returncode == 2, p.stderr[-2000:]
        import json

        for row in json.loads(p.stdout)["devices"]:
            assert not row["ok"]
            assert "device runs aarch64 Python 3.13 glibc 2.41" in row["error"], row
            assert "fleet wheelhouse --for trixie-arm64" in row["error"], row
        for name in names:  # nothing was sent: no venv, no unit
            left = on_device(
                out,
                name,
                "ls /opt/edgegossip /etc/systemd/system/edgegossip-agent.service 2>&1; true",
            ).stdout.decode()
            assert "No such file" in left and "releases" not in left, left
    finally:
        eg("lab", "down", str(out), check=False)
