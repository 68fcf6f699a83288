"""`edgegossip bench train`: ms per training step and peak memory, per model, backend and batch.

Each (model, backend) pair runs in a fresh process so its peak RSS is its own. The step is the
whole thing a device does per batch: forward, backward and the Nesterov update. A compiled
model's folder (`edgegossip model compile`) is measured as its agent runs it: backend
"compiled", onnxruntime on one thread, random inputs of its manifest's shape."""

from __future__ import annotations

import json
import subprocess
import sys

from edgegossip.models import NAMED

CASES = [
    (name, backend)
    for name, spec in NAMED.items()
    for backend in ("numpy", "onnx")
    if backend == "numpy" or spec.onnx
]
BATCHES = (32, 128)

_CHILD = r"""
import json, sys, time
import numpy as np
from edgegossip.models import make_model
from edgegossip.metrics import peak_rss_mb
from edgegossip.models.optim import NesterovSGD
name, backend, batch, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = make_model(name)
p = m.init(0); g = np.zeros_like(p); opt = NesterovSGD(m.n_params)
rng = np.random.default_rng(0)
shape, classes = m.input_shape or (784,), getattr(m, "classes", 10)
x = rng.standard_normal((batch, *shape), dtype=np.float32); y = rng.integers(0, classes, batch)
grad = m
if backend == "onnx":
    from edgegossip.models.onnx_backend import OnnxTrainer
    grad = OnnxTrainer(m)
def step():
    grad.loss_grad(p, g, x, y, rng); opt.step(p, g)
for _ in range(3):
    step()
best = float("inf")
for _ in range(3):
    t = time.perf_counter()
    for _ in range(steps):
        step()
    best = min(best, (time.perf_counter() - t) / steps)
print(json.dumps({"model": name, "backend": backend, "batch": batch, "params": m.n_params,
                  "ms_per_step": round(best * 1e3, 3),
                  "peak_rss_mb": peak_rss_mb()}))
"""


def run(cases=CASES, batches=BATCHES, steps: int = 60) -> dict:
    from edgegossip.models import onnx_available

    rows = []
    if not onnx_available():  # a NumPy-only install: measure what it can run
        cases = [c for c in cases if c[1] != "onnx"]
    for model, backend in cases:
        for batch in batches:
            n = steps * (10 if model == "logreg" else 1)
            p = subprocess.run(
                [sys.executable, "-c", _CHILD, model, backend, str(batch), str(n)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if p.returncode != 0:
                raise RuntimeError(f"{model}/{backend}: {p.stderr.strip().splitlines()[-1]}")
            rows.append(json.loads(p.stdout))
    return {"benchmark": "train", "results": rows}
