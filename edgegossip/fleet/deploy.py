"""Deploy one device: probe it, ship what it lacks, install, start; rolled out in batches."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from edgegossip import artifact, paths
from edgegossip.catalog import RUNNING
from edgegossip.data import mnist
from edgegossip.fleet import agentconf, bundle, remote, secrets, targets
from edgegossip.fleet.query import ask
from edgegossip.fleet.ssh import Ssh, SshError
from edgegossip.models import footprint

# room an install needs beyond the shipped files: a venv with numpy, pyzmq and edgegossip
VENV_MB = 200


def device_files(
    fleet, device, info: dict, include_wheels: bool, wheelhouse: Path, manifest: dict
) -> dict:
    """The per-device bundle, {name in archive: bytes or Path}, leaving out what it has."""
    _, server_secret = secrets.server_certificate(fleet.secrets, device.name)
    client_public, _ = secrets.client_certificate(fleet.secrets)
    ids = [d.id for d in fleet.devices]
    files: dict = {
        "install.sh": remote.INSTALL.encode(),
        "agent.toml": agentconf.toml(fleet, device).encode(),
        "link.keys": secrets.keyfile(fleet.secrets, device.id, ids, fleet.id).encode(),
        "server.key_secret": server_secret,
        "client.key": client_public,
        "edgegossip-agent.service": paths.devices_dir() / "edgegossip-agent.service",
        "60-edgegossip.conf": remote.SYSCTL.encode(),
    }
    if device.data:
        data = fleet.root / device.data
        if not data.is_file():
            raise ValueError(f"devices.{device.name}.data: {data} does not exist")
        if paths.sha256_of(data) != info.get("data_sha"):
            files["device.npz"] = data
    elif (name := agentconf.render(fleet, device).source) in mnist.DATASETS:
        cache = mnist.cache_path(name)
        if not cache.is_file():
            raise ValueError(
                f"{name} is not in this machine's cache ({cache}): "
                f"run `edgegossip data fetch {name}` (the devices get it from here)"
            )
        if paths.sha256_of(cache) != (info.get("dataset_sha") or {}).get(name):
            files[f"cache/{name}.npz"] = cache
    folder = agentconf.model_folder(fleet)
    if folder is not None and agentconf.model_digest(fleet) != info.get("model_sha"):
        for name in ("manifest.json", *json.loads((folder / "manifest.json").read_text())["files"]):
            files[f"model/{name}"] = folder / name
        if (folder / artifact.MEMORY).is_file():  # the agent's check at start reads it
            files[f"model/{artifact.MEMORY}"] = folder / artifact.MEMORY
    if include_wheels:
        for w in manifest["wheels"]:
            files[f"wheels/{w}"] = wheelhouse / w
    return files


def memory_problem(fleet, device, mem_mb: int | None) -> str | None:
    """Why the device's RAM cannot hold a step of the fleet's compiled model at its batch, as
    `model compile --batch` measured it (models/footprint.py), or None. The least of the ways
    the agent may train it: which one it takes depends on the device's data, and its agent
    checks again at start with its data counted."""
    folder = agentconf.model_folder(fleet)
    fp = footprint.read(folder) if folder is not None else None
    if fp is None or mem_mb is None:
        return None
    batch = agentconf.render(fleet, device).batch
    need = min(mb for way in fp.points if (mb := fp.at(batch, way)) is not None)
    if need <= mem_mb:
        return None
    return (
        f"a training step of the fleet's model at batch {batch} needs about {need:.0f} MB "
        f"(as model compile measured it) and the device has {mem_mb} MB: set a smaller "
        "train.batch for it, or freeze more of the model"
    )


def _size(content) -> int:
    return content.stat().st_size if isinstance(content, Path) else len(content)


def deploy_one(
    fleet,
    device,
    deadline: float,
    wheelhouse: Path,
    manifest: dict,
    extras: str,
    wait_s: float = 60,
    accept_new: bool = False,
) -> dict:
    ssh = Ssh(fleet, device, deadline, accept_new=accept_new)
    info = remote.probe(ssh)
    want = manifest["platform"]
    if bundle.misfits(info, want):
        raise bundle.PlatformMismatch(
            f"device runs {bundle.describe(info)}; the wheelhouse is for "
            f"{bundle.describe(want)} (build one with {targets.build_hint(info)} and pass "
            "--wheelhouse DIR)"
        )
    if agentconf.render(fleet, device).transport == "zmq" and not manifest.get("zmq_draft", True):
        raise ValueError(
            "net.transport is zmq but the wheelhouse's pyzmq lacks the draft API "
            "(RADIO/DISH): run `make venv` (it builds one) and `fleet wheelhouse` "
            "again, or use transport udp"
        )
    why = memory_problem(fleet, device, info.get("mem_mb"))
    if why is not None:
        raise ValueError(f"{why}; nothing was changed")
    new_release = manifest["release"] not in info["releases"]
    files = device_files(fleet, device, info, new_release, wheelhouse, manifest)
    shipped = sum(_size(c) for c in files.values())
    need_mb = shipped / 1e6 + (VENV_MB if new_release else 0)
    if info["free_mb"] < need_mb:
        raise ValueError(
            f"disk full: {info['free_mb']} MB free under /opt, the install needs about "
            f"{need_mb:.0f} MB; nothing was changed"
        )
    result = remote.install(ssh, bundle.tar(files), manifest["release"], extras)
    row = {
        "address": device.address,
        "version_before": info["version"] or None,
        "release_before": info["release"] or None,
        "version_after": result["version"],
        "release_after": manifest["release"],
        "changed": result["changed"],
        "shipped_mb": round(shipped / 1e6, 1),
        "state": None,
    }
    # the agent's config hash tells a running agent that reloaded (new peers) or restarted on
    # the new config from one still on the old
    want = hashlib.sha256(files["agent.toml"]).hexdigest()[:12]
    left = min(wait_s, max(0.0, deadline - time.monotonic()))
    row["state"] = wait_training(fleet, device, left, want)
    return row


def wait_training(fleet, device, timeout_s: float, config_hash: str | None = None) -> str:
    """Poll the control endpoint until the agent runs (catalog.RUNNING: trains, or closes),
    with config_hash if given; its last state."""
    end = time.monotonic() + timeout_s
    state = "starting"
    while time.monotonic() < end:
        try:
            st = ask(fleet, device, "status", timeout_s=2.0)
            state = st["state"]
            if state in RUNNING and (config_hash is None or st["config_hash"] == config_hash):
                return state
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    return state


def batches(devices: list, batch: str) -> list[list]:
    """--batch N or P%: the rollout's groups, in inventory order."""
    n = len(devices)
    if batch.endswith("%"):
        size = max(1, round(n * float(batch[:-1]) / 100))
    else:
        size = int(batch)
    if size < 1:
        raise ValueError("--batch must be at least 1 device")
    return [devices[i : i + size] for i in range(0, n, size)]


def rollout(devices: list, batch: str, max_fail: str, run_batch) -> list[dict]:
    """Run batch after batch; stop once failures exceed max_fail (N or P% of all devices): the
    devices not reached get a row saying so."""
    limit = (
        (len(devices) * float(max_fail[:-1]) / 100) if max_fail.endswith("%") else float(max_fail)
    )
    rows, failed = [], 0
    groups = batches(devices, batch)
    for k, group in enumerate(groups):
        got = run_batch(group)
        rows += got
        failed += sum(1 for r in got if not r["ok"])
        if failed > limit:
            for rest in groups[k + 1 :]:
                rows += [
                    {
                        "name": d.name,
                        "ok": False,
                        "skipped": True,
                        "error": f"not attempted: {failed} devices failed (--max-fail {max_fail})",
                        "seconds": 0.0,
                    }
                    for d in rest
                ]
            break
    return rows


__all__ = ["deploy_one", "rollout", "wait_training", "SshError"]
