"""`edgegossip bench train`: ms per training step and peak memory, per model, backend and batch.

Each (model, backend) pair runs in a fresh process so its peak RSS is its own. The step is the
whole thing a device does per batch: forward, backward and the Nesterov update. A compiled
model's folder (`edgegossip model compile`) is measured as its agent runs it: backend
"compiled", onnxruntime on one thread (`threads`: more, or 0 for the runtime's default),
random inputs of its manifest's shape; a model with a
frozen prefix also as "compiled-prefix", trained on the prefix's outputs computed once
(compiler/prefix.py). Beside it, with
`reference` (the model's own PyTorch class, FILE.py:CLASS), the same step of the same model in
PyTorch on as many threads, timed alike in the same run: backend "pytorch", and each compiled row's
`vs_reference` is its time over PyTorch's at that batch. PyTorch runs in its own interpreter
(`python`, default this one), so it need not share an environment with edgegossip."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from edgegossip.errors import EdgegossipError
from edgegossip.models import NAMED

CASES = [
    (name, backend)
    for name, spec in NAMED.items()
    for backend in ("numpy", "onnx")
    if backend == "numpy" or spec.onnx
]
BATCHES = (32, 128)

# Both children's timing: 3 steps to warm up, then the best of 3 runs of `steps` steps, in ms.
_BEST_MS = r"""
import time
def best_ms(step, steps):
    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t) / steps)
    return round(best * 1e3, 3)
"""

_CHILD = (
    _BEST_MS
    + r"""
import json, sys
import numpy as np
from edgegossip.models import make_model
from edgegossip.metrics import peak_rss_mb
from edgegossip.models.optim import NesterovSGD
name, backend, batch, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
threads, profile = int(sys.argv[5]), sys.argv[6] == "1"
m = make_model(name, threads=threads)
p = m.init(0); g = np.zeros_like(p); opt = NesterovSGD(m.n_params)
rng = np.random.default_rng(0)
shape, classes = m.input_shape or (784,), getattr(m, "classes", 10)
if getattr(m, "input_dtype", np.dtype(np.float32)).kind == "i":  # token ids: row 0 is in range
    x = np.zeros((batch, *shape), np.float32)
else:
    x = rng.standard_normal((batch, *shape), dtype=np.float32)
if getattr(m, "loss", "cross-entropy") == "mse":  # targets in the output's shape
    y = rng.standard_normal((batch, classes), dtype=np.float32)
else:
    y = rng.integers(0, classes, batch)
grad = m
if backend == "compiled-prefix":  # the frozen prefix's outputs, computed once, trained on
    x = m.features(x); m.use_prefix()
if backend == "onnx":
    from edgegossip.models.onnx_backend import OnnxTrainer
    grad = OnnxTrainer(m)
def step():
    grad.loss_grad(p, g, x, y, rng); opt.step(p, g)
row = {"model": name, "backend": backend, "batch": batch, "params": m.n_params,
       "ms_per_step": best_ms(step, steps), "peak_rss_mb": peak_rss_mb()}
if profile and hasattr(m, "start_profiling"):  # after the timing, which runs without it
    import tempfile
    from edgegossip.bench.profile import WARMUP, by_kind
    with tempfile.TemporaryDirectory() as tmp:
        m.start_profiling(f"{tmp}/step")
        for _ in range(WARMUP + steps):
            step()
        row["profile"] = by_kind(m.end_profiling())
print(json.dumps(row))
"""
)


# Self-contained (torch and numpy only): it may run in the user's PyTorch environment.
_REFERENCE_CHILD = (
    _BEST_MS
    + r"""
import importlib.util, json, resource, sys
import numpy as np, torch
path, cls, folder = sys.argv[1:4]
batch, steps, threads = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
spec = importlib.util.spec_from_file_location("reference_model", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
m = getattr(mod, cls)()
manifest = json.load(open(f"{folder}/manifest.json"))
frozen = set(manifest.get("frozen", []))  # as model compile --freeze: not trained, and a
for name, p in m.named_parameters():  # BatchNorm frozen whole runs on its running statistics
    p.requires_grad_(name not in frozen)
n = sum(p.numel() for p in m.parameters() if p.requires_grad)
if n != manifest["params"]["count"]:
    sys.exit(f"{path}:{cls} trains {n} parameters, the compiled model "
             f"{manifest['params']['count']}")
if threads:  # else torch's own default
    torch.set_num_threads(threads)
torch.manual_seed(0)
if manifest["input"].get("dtype", "float32").startswith("int"):
    x = torch.zeros(batch, *manifest["input"]["shape"], dtype=torch.int64)
else:
    x = torch.randn(batch, *manifest["input"]["shape"])
if manifest["loss"] == "cross-entropy":
    y, loss = torch.randint(0, manifest["classes"], (batch,)), torch.nn.functional.cross_entropy
else:
    y, loss = torch.randn(batch, *manifest["output"]["shape"]), torch.nn.functional.mse_loss
m.train()
for mod in m.modules():
    if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.affine and not (
        mod.weight.requires_grad or mod.bias.requires_grad
    ):
        mod.eval()
opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.001, momentum=0.99,
                      nesterov=True)
def step():
    opt.zero_grad(); loss(m(x), y).backward(); opt.step()
ms = best_ms(step, steps)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
print(json.dumps({"model": folder, "backend": "pytorch", "batch": batch, "params": n,
                  "ms_per_step": ms,
                  "peak_rss_mb": round(rss / 1024, 1)}))
"""
)


# A compiled step's process computes in onnxruntime; NumPy's BLAS threads there would only spin
# against onnxruntime's own (ResNet-8 at batch 128 on the default threads: 45 ms with them,
# 25 ms without), so that child runs with one, as the emulated agents do.
_ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _child(argv: list[str], what: str, env: dict | None = None) -> dict:
    env = {**os.environ, **env} if env else None
    p = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines() or ["exit status " + str(p.returncode)]
        raise EdgegossipError(f"{what}: {lines[-1]}")
    return json.loads(p.stdout)


def against(
    result: dict,
    folder: str,
    reference: str,
    python: str,
    steps: int,
    batches=BATCHES,
    threads: int = 1,
) -> dict:
    """Add PyTorch's rows for the compiled model in `folder` and each compiled row's ratio."""
    path, _, cls = reference.rpartition(":")
    ref = {}
    for batch in batches:
        argv = [python, "-c", _REFERENCE_CHILD, path, cls, folder, str(batch), str(steps)]
        argv.append(str(threads))
        ref[batch] = _child(argv, f"the reference {reference}")
    for row in result["results"]:
        row["vs_reference"] = round(row["ms_per_step"] / ref[row["batch"]]["ms_per_step"], 3)
    result["results"] += list(ref.values())
    return result


def step_peaks(folder: str, batches: tuple[int, ...], steps: int = 1) -> dict[str, list]:
    """A compiled model's training step, as its agent runs it (one thread), in a fresh process
    per batch: {way: [(batch, peak RSS in MB)]}, for its whole graph and, with a frozen prefix,
    for the part after it on the prefix's outputs (models/footprint.py's ways)."""
    from edgegossip.artifact import read
    from edgegossip.models.footprint import CACHED, WHOLE

    ways = (WHOLE, CACHED) if read(folder).has_prefix else (WHOLE,)
    out: dict[str, list] = {}
    for way in ways:
        for batch in batches:
            argv = [sys.executable, "-c", _CHILD, folder, way, str(batch), str(steps), "1", "0"]
            row = _child(argv, f"{folder} at batch {batch}", _ONE_BLAS_THREAD)
            out.setdefault(way, []).append((batch, row["peak_rss_mb"]))
    return out


def run(
    cases=CASES, batches=BATCHES, steps: int = 60, threads: int = 1, profile: bool = False
) -> dict:
    """Each case's rows; threads: the step's threads (0: the runtime's default, every core);
    profile: a compiled row also carries "profile", its step's time by kind of op
    (bench/profile.py), from as many steps again with onnxruntime's profiler on."""
    from edgegossip.models import onnx_available

    rows = []
    if not onnx_available():  # a NumPy-only install: measure what it can run
        cases = [c for c in cases if c[1] != "onnx"]
    for model, backend in cases:
        for batch in batches:
            n = steps * (10 if model == "logreg" else 1)
            argv = [sys.executable, "-c", _CHILD, model, backend, str(batch), str(n), str(threads)]
            argv.append("1" if profile else "0")
            env = _ONE_BLAS_THREAD if backend.startswith("compiled") else None
            rows.append(_child(argv, f"{model}/{backend}", env))
    return {"benchmark": "train", "threads": threads, "results": rows}
