"""Collect a fleet's models: each device's checkpoint and metrics into OUT/agentID/, the same
summary and plots as `emulate` (each model and their average on the fleet's test set:
fleet/evaluation.py), and the average as ONNX (a compiled model's own file, trained)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from edgegossip import catalog, checkpoint
from edgegossip.errors import EdgegossipError
from edgegossip.fleet import agentconf, evaluation, parallel, remote
from edgegossip.fleet.query import ask
from edgegossip.fleet.ssh import Ssh
from edgegossip.metrics import read as read_metrics
from edgegossip.models import EXPORTABLE, ONNX_MISSING, make_model, onnx_available
from edgegossip.report import page
from edgegossip.report.average import average
from edgegossip.report.summary import summarize


def fetch(fleet, device, deadline: float, out: Path, live: bool, model) -> dict:
    row = {}
    if live:  # a checkpoint of this moment, if the agent answers; else its last one
        try:
            row["live_step"] = ask(fleet, device, "checkpoint", timeout_s=25)["step"]
        except Exception as e:
            row["note"] = f"no live checkpoint ({e}); took the last one"
    where = out / f"agent{device.id}"
    remote.fetch_output(Ssh(fleet, device, deadline), where)
    try:
        _check(where, model.n_params, model.digest)
    except (checkpoint.CheckpointError, ValueError, KeyError) as e:
        shutil.rmtree(where, ignore_errors=True)  # never averaged, never read again
        raise CollectError(f"the device's checkpoint is refused: {e}") from None
    try:
        _check_metrics(where / "metrics.jsonl")
    except (ValueError, OSError) as e:
        shutil.rmtree(where, ignore_errors=True)
        raise CollectError(f"the device's metrics are refused: {e}") from None
    return row


class CollectError(EdgegossipError, RuntimeError):
    pass


def _check(where: Path, n_params: int, digest: str | None = None) -> None:
    """What a device sent is a checkpoint of this fleet's model: trained by it (its digest),
    its parameters of the right shape and all finite, its step a count. Anything else is that
    device's failed row."""
    state = checkpoint.load(where)
    if state is None:
        raise ValueError("there is none")
    checkpoint.check_model(state, digest)
    params, step = state["params"], state["step"]
    if params.shape != (n_params,) or params.dtype != np.float32:
        raise ValueError(f"params are {params.dtype}{list(params.shape)}, not float32[{n_params}]")
    if not np.isfinite(params).all():
        raise ValueError("params are not all finite")
    if step.shape != () or step.dtype.kind not in "iu" or int(step) < 0:
        raise ValueError("its step is not a count")


def _check_metrics(path: Path) -> None:
    """Every record the device sent is one an agent writes (catalog.invalid): the summary,
    the report and the plots read them as such."""
    if not path.is_file():
        return
    for n, record in enumerate(read_metrics(path), 1):
        why = catalog.invalid(record)
        if why is not None:
            raise ValueError(f"metrics.jsonl record {n}: {why}")


def model_name(fleet) -> str:
    """What make_model takes on this machine: the name, or the fleet's copy of its compiled
    model (a device's config names the device's copy)."""
    folder = agentconf.model_folder(fleet)
    return (
        str(folder) if folder is not None else fleet.settings.get("train", {}).get("model", "mlp")
    )


def collect(
    fleet,
    devices: list,
    out: Path,
    live: bool,
    concurrency: int,
    timeout_s: float,
    test: str | None = None,
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    name = model_name(fleet)
    model = make_model(name)
    rows = parallel.each(
        devices,
        lambda d, dl: fetch(fleet, d, dl, out, live, model),
        concurrency,
        timeout_s,
        verb="fetched",
    )
    got = [d for d, r in zip(devices, rows) if r["ok"]]
    data, calibration = evaluation.load(fleet, devices, test, targets=model.loss == "mse")
    summary = (
        summarize(out, [d.id for d in got], name, None, "fleet", 0.0, None, data)
        if got
        else {
            "average_model_accuracy": None,
            "average_model_mse": None,
            "agents": [],
            "plots": [],
            "observed_loss": None,
        }
    )
    by_id = {a["agent"]: a for a in summary["agents"]}
    for d, r in zip(devices, rows):
        a = by_id.get(d.id, {})
        state = checkpoint.load(out / f"agent{d.id}") if r["ok"] else None
        r.update(
            agent=d.id,
            accuracy=a.get("accuracy"),
            mse=a.get("mse"),
            peak_rss_mb=a.get("peak_rss_mb"),
            step=int(state["step"]) if state is not None else None,
        )
    summary["onnx"], summary["onnx_error"] = _export(
        out, [d.id for d in got], name, model, calibration
    )
    summary.update(devices=rows, model=name, fleet=fleet.name)
    settings = {"fleet": fleet.name, "devices": len(devices), "collected": len(got)}
    settings |= {
        f"{s}.{k}": v for s in sorted(fleet.settings) for k, v in fleet.settings[s].items()
    }
    names = {d.id: d.name for d in devices}
    summary["report"] = str(page.write(out, f"fleet {fleet.name}", summary, settings, names))
    summary.pop("agents", None)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _export(
    out: Path, ids: list[int], name: str, model, calibration
) -> tuple[str | None, str | None]:
    """The average model as OUT/average.onnx: a compiled model's own ONNX file with the trained
    parameters written in (models/writeback.py), or the mlp and logreg exported."""
    from edgegossip.models.compiled import CompiledModel

    if not ids:
        return None, "no checkpoint collected"
    compiled = isinstance(model, CompiledModel)
    if not compiled and name not in EXPORTABLE:
        return None, f"ONNX export covers {', '.join(EXPORTABLE)} and compiled models"
    if not onnx_available():
        return None, ONNX_MISSING
    states = [checkpoint.load(out / f"agent{i}") for i in ids]
    avg = average([s["params"] for s in states if s is not None])
    np.save(out / "average.npy", avg)
    path = out / "average.onnx"
    if compiled:
        from edgegossip.models import writeback

        running = writeback.running_statistics(model, avg, calibration)
        writeback.write(model, avg, path, running)
    else:
        from edgegossip.models.onnx_backend import export

        export(model, avg, path)
    return str(path), None
