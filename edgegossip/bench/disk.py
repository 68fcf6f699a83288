"""`edgegossip bench disk`: what an agent's disk costs per day, by checkpoint policy, and what
writing a checkpoint costs the training loop.

Each row runs one local-only agent (no network in the way) for --seconds in a process of its
own, its output in a fresh folder on the disk under --dir (not a tmpfs: the kernel counts no
writes there):

- `every 200 steps`: the former default cadence, the reference;
- `every S s`: checkpoints by time, as the agent now does; the run shortens the default 600 s
  to S so that several happen, and "per day" is scaled back to 600 s.

From the agent's own records: the bytes the kernel counted as written by it (/proc/self/io),
the checkpoints written, the median step and the longest step taken while a checkpoint was
being written in the background. Beside them, measured in the same run on the same disk: one
synchronous checkpoint.save of a model-sized array with its fsync, the stall every checkpoint
was before writes moved off the training thread.

    per day = metrics bytes per second * 86400 + checkpoint bytes * checkpoints per day

for the time policy (144 checkpoints a day at 600 s); for the reference, per day is simply the
bytes the kernel counted per second while it ran, times 86400."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from edgegossip import checkpoint, config
from edgegossip.bench import local_agent
from edgegossip.metrics import read
from edgegossip.storage import METRICS

DAY = 86400
DEFAULT_EVERY_S = config.default("checkpoint_every_s")


def _agent(model: str, out: Path, seconds: float, policy: dict) -> list[dict]:
    local_agent.finish(local_agent.start(model, out, seconds, **policy), model, seconds + 300)
    return read(out / METRICS)


def _sync_write(where: Path, n_params: int) -> float:
    """Seconds one synchronous, fsynced checkpoint of this size takes on this disk."""
    x = np.random.default_rng(0).standard_normal(n_params).astype(np.float32)
    t = time.perf_counter()
    checkpoint.save(where, params=x, step=np.array(0))
    return time.perf_counter() - t


def _row(
    model: str, name: str, recs: list[dict], out: Path, per_day_checkpoints: float | None
) -> dict:
    steps = [r for r in recs if r.get("event") is None and "step" in r]
    stop = [r for r in recs if r.get("event") == "stop"][-1]
    first, last = steps[0], stop
    span = max(last["time"] - first["time"], 1e-9)
    written = (last["disk_written_mb"] or 0) - (first["disk_written_mb"] or 0)
    ckpt_bytes = (out / checkpoint.NAME).stat().st_size
    metrics_bytes = (out / METRICS).stat().st_size
    rate = (last["step"] - first["step"]) / span
    if per_day_checkpoints is None:  # the reference: what the kernel counted, as it ran
        per_day = written * 1e6 / span * DAY
    else:
        per_day = metrics_bytes / span * DAY + ckpt_bytes * per_day_checkpoints
    stalls = [r["checkpoint_stall_ms"] for r in recs if r.get("checkpoint_stall_ms")]
    medians = [r["step_ms"] for r in steps if r.get("step_ms")]
    return {
        "model": model,
        "policy": name,
        "steps_per_s": round(rate, 1),
        "checkpoints": len({r["checkpoint_step"] for r in recs if r.get("checkpoint_step")}),
        "checkpoint_mb": round(ckpt_bytes / 1e6, 2),
        "written_mb_per_s": round(written / span, 3),
        "per_day_gb": round(per_day / 1e9, 2),
        "step_ms_median": round(float(np.median(medians)), 2) if medians else None,
        "checkpoint_stall_ms": max(stalls) if stalls else None,
    }


def run(models=("logreg", "mlp"), seconds: float = 30.0, where: Path | None = None) -> dict:
    base = Path(tempfile.mkdtemp(prefix="bench-disk-", dir=where or Path.cwd()))
    every_s = float(max(2, round(seconds / 6)))
    rows: list[dict] = []
    try:
        for model in models:
            n_params = config_n_params(model)
            ref = base / f"{model}-sync"
            sync_ms = round(_sync_write(ref, n_params) * 1e3, 1)
            policies = [
                (
                    "every 200 steps",
                    {"checkpoint_every": 200, "checkpoint_every_s": 0.0},
                    None,
                ),
                (
                    f"every {every_s:g} s (as 600 s)",
                    {"checkpoint_every_s": every_s},
                    DAY / DEFAULT_EVERY_S,
                ),
            ]
            for name, policy, per_day in policies:
                out = base / f"{model}-{len(rows)}"
                recs = _agent(model, out, seconds, policy)
                rows.append({**_row(model, name, recs, out, per_day), "sync_write_ms": sync_ms})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"benchmark": "disk", "seconds": seconds, "results": rows}


def config_n_params(model: str) -> int:
    from edgegossip.models import make_model

    return make_model(model).n_params
