"""`bench train --profile`: where a compiled step's time goes, by kind of op.

onnxruntime's profiler (SessionOptions.enable_profiling) writes a JSON trace: one "model_run"
event per run of the training graph and one "<node>_kernel_time" event per op run in it. The
first WARMUP runs are left out (allocation, first-touch); each op kind's time is summed over the
rest and divided by their number. A convolution whose weight has one input channel per group and
whose input has more than one channel is depthwise, named apart: onnxruntime runs it fast only
when its weights are constants of the graph, and a trained weight is an input of it
(docs/own-model.md)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

WARMUP = 3
# the rows of kinds a profile lists, largest first; the rest are summed as "other ops"
TOP = 12


def _shapes(args: dict) -> list[list[int]]:
    return [next(iter(d.values()), []) for d in args.get("input_type_shape", [])]


def kind(args: dict) -> str:
    """The op's type, and "depthwise" for a convolution or its transpose of one channel per
    group over a many-channel input (W [C, 1, *k] beside x [N, C, ...])."""
    op = str(args.get("op_name", "?"))
    shapes = _shapes(args)
    if op in ("Conv", "ConvTranspose") and len(shapes) > 1:
        x, w = shapes[0], shapes[1]
        if len(x) > 2 and len(w) > 2 and w[1] == 1 and x[1] > 1:
            return f"{op} depthwise"
    return op


def by_kind(trace: str | Path) -> dict:
    """{"run_ms": a profiled run of the training graph, "kernels_ms": its ops' own time,
    "ops": [{op, calls, ms, share}]}, per step, largest first: the TOP kinds, then "other ops";
    a share is of kernels_ms. The profiler adds its own cost to every op, so both come out
    above the step's unprofiled time (bench train's ms_per_step): read its shares."""
    events = json.loads(Path(trace).read_text())
    runs = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )[WARMUP:]
    if not runs:
        raise ValueError(f"{trace}: fewer than {WARMUP + 1} runs of the training graph")
    us: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= runs[0][0]:
            k = kind(e.get("args", {}))
            us[k] += e["dur"]
            calls[k] += 1
    n, total = len(runs), sum(us.values())
    ranked = sorted(us, key=lambda k: -us[k])
    rows = [(k, calls[k], us[k]) for k in ranked[:TOP]]
    if ranked[TOP:]:
        rest = ranked[TOP:]
        rows.append(("other ops", sum(calls[k] for k in rest), sum(us[k] for k in rest)))
    return {
        "run_ms": round(sum(b - a for a, b in runs) / n / 1e3, 3),
        "kernels_ms": round(total / n / 1e3, 3),
        "ops": [
            {
                "op": k,
                "calls": round(c / n, 1),
                "ms": round(t / n / 1e3, 3),
                "share": round(t / total, 3),
            }
            for k, c, t in rows
        ],
    }
