"""The operator's view of one device's agent: its control endpoint, and SSH when that is silent."""

from __future__ import annotations

from edgegossip.control import client
from edgegossip.fleet import remote, secrets
from edgegossip.fleet.ssh import Ssh, SshError

_SYSTEMD = {
    "active": "starting",
    "activating": "starting",
    "reloading": "starting",
    "deactivating": "stopped",
    "inactive": "stopped",
    "failed": "failed",
}


def ask(fleet, device, op: str, timeout_s: float = 3.0) -> dict:
    _, client_secret = secrets.client_certificate(fleet.secrets)
    server_public, _ = secrets.server_certificate(fleet.secrets, device.name)
    return client.request(
        device.address, fleet.control_port, op, str(client_secret), str(server_public), timeout_s
    )


def status(fleet, device, deadline: float | None = None) -> dict:
    """One status row: from the control endpoint; else from systemd over SSH, saying so."""
    row = {
        "name": device.name,
        "address": device.address,
        "reachable": False,
        "state": "unreachable",
        "step": None,
        "epoch": None,
        "loss": None,
        "accuracy": None,
        "source": None,
    }
    try:
        st = ask(fleet, device, "status")
        row.update({k: v for k, v in st.items() if k != "ok"}, reachable=True, source="control")
        return row
    except client.ControlError as e:
        row["control_error"] = str(e)
    try:
        active, last_log = remote.service_state(Ssh(fleet, device, deadline))
    except SshError as e:
        row["error"] = str(e)
        return row
    row.update(
        reachable=True,
        source="ssh",
        service=active,
        last_log=last_log,
        state=_SYSTEMD.get(active, "failed"),
    )
    return row
