"""Lab devices up and down. Each device is `systemd-nspawn --boot` of the cached Debian root,
read-only under a throw-away overlay (--volatile=overlay), in its own network namespace, with its
own hostname and SSH host key and the fleet's SSH key authorised for the user `pi` (passwordless
sudo, as on Raspberry Pi OS; root cannot log in), so every fleet command goes through sudo.
The lab's state
(OUT/lab.json, and a pointer in /run/edgegossip/labs so `lab down --all` finds it after a crash)
names everything it made."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgegossip.errors import EdgegossipError
from edgegossip.fleet import create as fleet_create
from edgegossip.fleet import inventory
from edgegossip.fleet.ssh import Ssh, SshError
from edgegossip.lab import network
from edgegossip.lab import root as lab_root

REGISTRY = Path("/run/edgegossip/labs")
STATE = "lab.json"


class LabError(EdgegossipError, RuntimeError):
    pass


def _save_state(out: Path, state: dict) -> None:
    (out / STATE).write_text(json.dumps(state, indent=1) + "\n")
    REGISTRY.mkdir(parents=True, exist_ok=True)
    (REGISTRY / f"{state['lab']}.json").write_text(json.dumps({"out": str(out.resolve())}) + "\n")


def up(
    n: int,
    out: Path,
    loss: float = 0.0,
    rate: str | None = None,
    settings: dict | None = None,
    split: str | None = "iid",
    progress=print,
) -> dict:
    if os.geteuid() != 0:
        raise LabError("a lab needs root (network namespaces, systemd-nspawn)")
    if (out / STATE).exists():
        raise LabError(f"{out}: a lab is there already (`edgegossip lab down {out}` first)")
    root = lab_root.ensure(progress=progress)
    lab = network.free_lab_id()
    out.mkdir(parents=True, exist_ok=True)
    names = [f"lab{lab}-{i}" for i in range(n)]
    state: dict[str, Any] = {
        "lab": lab,
        "root": str(root),
        "devices": [],
        "loss": loss,
        "rate": rate,
    }
    _save_state(out, state)
    try:
        network.up(lab, n, loss, rate)
        hosts = [
            {
                "name": nm,
                "address": network.address(lab, i),
                "user": lab_root.USER,
                "groups": ["lab"],
            }
            for i, nm in enumerate(names)
        ]
        fleet = fleet_create.create(
            out, f"lab{lab}", hosts, settings or {}, split=split, progress=progress
        )
        # the operator's side of the lab is the host's veth: only it may reach the control
        # sockets and /metrics, as a fleet.toml with control_from = [the laptop] would say
        fleet = replace(fleet, control_from=(network.host_address(lab),))
        inventory.save(fleet)
        pub = (fleet.ssh_key_path().with_suffix(".pub")).read_text()
        progress(f"booting {n} devices from {root}")
        for i, nm in enumerate(names):
            state["devices"].append(_boot(out, root, lab, i, nm, pub, fleet))
            _save_state(out, state)
        for i, nm in enumerate(names):
            _wait_ssh(fleet, fleet.device(nm), time.monotonic() + 90)
            progress(f"{nm} up at {network.address(lab, i)}")
    except BaseException:
        down(out)
        raise
    return {
        "lab": lab,
        "fleet": str(out / inventory.NAME),
        "devices": [{"name": d["name"], "address": d["address"]} for d in state["devices"]],
    }


def _boot(out: Path, root: Path, lab: int, i: int, name: str, pub: str, fleet) -> dict:
    d = out / "lab" / name
    keys = d / "hostkeys"
    keys.mkdir(parents=True, exist_ok=True)
    key = keys / "ssh_host_ed25519_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
        check=True,
        capture_output=True,
    )
    (d / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n")  # sudo resolves its host
    (d / "authorized_keys").write_text(pub)
    (d / "authorized_keys").chmod(0o644)  # sshd reads it as the user
    host_pub = (keys / "ssh_host_ed25519_key.pub").read_text().split()
    with open(fleet.secrets / "known_hosts", "a") as f:  # pinned: no trust on first use here
        f.write(f"{network.address(lab, i)} {host_pub[0]} {host_pub[1]}\n")
    log = open(d / "console.log", "wb")
    argv = [
        "systemd-nspawn",
        "-D",
        str(root),
        "--boot",
        "--register=no",
        "--keep-unit",
        "-M",
        name,
        f"--hostname={name}",
        "--volatile=overlay",
        "--console=pipe",
        f"--network-namespace-path=/run/netns/{network.device_ns(lab, i)}",
        f"--bind-ro={keys}:/etc/ssh/lab",
        f"--bind-ro={d / 'hosts'}:/etc/hosts",
        f"--bind-ro={d / 'authorized_keys'}:/home/{lab_root.USER}/.ssh/authorized_keys",
    ]
    p = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    return {
        "name": name,
        "address": network.address(lab, i),
        "pid": p.pid,
        "netns": network.device_ns(lab, i),
    }


def _wait_ssh(fleet, device, deadline: float) -> None:
    last = "not started"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((device.address, device.port), timeout=1):
                pass
            # bounded on the device: a boot job that hangs (network-online can wait 2 min) must
            # not leave a killed ssh client behind, nor keep the lab from coming up
            Ssh(fleet, device).run(
                "timeout 45 systemctl is-system-running --wait >/dev/null 2>&1; true", timeout=60
            )
            return
        except (OSError, SshError) as e:
            last = str(e)
            time.sleep(0.5)
    raise LabError(f"{device.name}: sshd did not answer in time ({last})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def down(out: Path) -> list[str]:
    """Stop the lab's devices and remove its network; what was removed. Safe to call twice."""
    try:
        state = json.loads((out / STATE).read_text())
    except (OSError, ValueError):
        raise LabError(f"{out}: no lab there ({STATE} missing)") from None
    removed = []
    try:
        fleet = inventory.load(out)
    except inventory.InventoryError:
        fleet = None
    for dev in state.get("devices", []):
        if fleet is not None:  # close the multiplexed SSH connection to it
            try:
                Ssh(fleet, fleet.device(dev["name"])).close()
            except (inventory.InventoryError, subprocess.TimeoutExpired):
                pass
        pid = dev["pid"]
        if _alive(pid) and _is_nspawn(pid):
            os.kill(pid, signal.SIGTERM)  # nspawn powers the container off
    deadline = time.monotonic() + 15
    for dev in state.get("devices", []):
        while _alive(dev["pid"]) and _is_nspawn(dev["pid"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(dev["pid"]) and _is_nspawn(dev["pid"]):
            os.killpg(dev["pid"], signal.SIGKILL)
        removed.append(dev["name"])
    removed += network.down(state["lab"])
    (REGISTRY / f"{state['lab']}.json").unlink(missing_ok=True)
    (out / STATE).unlink(missing_ok=True)
    return removed


def _is_nspawn(pid: int) -> bool:
    try:
        return b"systemd-nspawn" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def down_all() -> list[str]:
    """Every lab this machine knows of, and the leftovers of crashed ones."""
    removed = []
    for ptr in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            out = Path(json.loads(ptr.read_text())["out"])
            removed += down(out)
        except (LabError, OSError, ValueError, KeyError):
            ptr.unlink(missing_ok=True)
    for pid_dir in Path("/proc").iterdir():  # nspawn processes booting a lab root, orphaned
        if pid_dir.name.isdigit():
            try:
                cmd = (pid_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                cmd
                and cmd[0].endswith(b"systemd-nspawn")
                and any(
                    re.search(
                        rb"network-namespace-path=/run/netns/"
                        + network.PREFIX.encode()
                        + rb"\d+d\d+",
                        a,
                    )
                    for a in cmd
                )
            ):
                os.kill(int(pid_dir.name), signal.SIGKILL)
                removed.append(f"nspawn:{pid_dir.name}")
    for lab in network.all_labs():
        removed += network.down(lab)
    return removed
