"""Trained parameters written back into the user's own model: the artifact's model.onnx (the
file they compiled, as given) with each parameter's initializer replaced by its trained value,
so stock onnxruntime and the framework they exported from load it as they would their own.

BatchNorm's running mean and variance are not trained and not gossiped (the training step uses
each batch's statistics), so they are estimated here, for the parameters being written, from
batches of training data: the mean of the batch means, and the mean of the batch variances plus
the variance of the batch means (the law of total variance over equal batches), which is the
population variance of the examples seen when every batch has the same size. This is the
re-estimation step used after weight averaging (Izmailov et al. 2018, SWA's bn_update).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from edgegossip.compiler.errors import CompileError
from edgegossip.compiler.inference import for_inference
from edgegossip.models.compiled import CompiledModel


def running_statistics(
    model: CompiledModel, params: np.ndarray, batches: Iterable[tuple[np.ndarray, np.ndarray]]
) -> dict[str, np.ndarray]:
    """{running mean/var initializer: value} from equal-sized batches of (x, y)."""
    seen: dict[str, list[np.ndarray]] = {}
    for x, y in batches:
        for name, v in model.batch_statistics(params, x, y).items():
            seen.setdefault(name, []).append(np.asarray(v, np.float64))
    state = model.manifest.state
    if state and not seen:
        raise CompileError("no batches to estimate BatchNorm statistics from")
    out = {}
    for mean, var in _mean_and_variance(model, seen):  # each BatchNorm's, by its inputs
        means = np.asarray(seen[mean])
        out[mean] = means.mean(axis=0)
        out[var] = np.mean(seen[var], axis=0) + means.var(axis=0)
    return out


def _mean_and_variance(model: CompiledModel, seen: dict) -> list[tuple[str, str]]:
    """(running mean, running variance) of each BatchNormalization of the user's model whose
    statistics the step gave: its inputs 3 and 4, as the ONNX spec orders them."""
    source = onnx.load(str(model.folder / "model.onnx"))
    return [
        (n.input[3], n.input[4])
        for n in source.graph.node
        if n.op_type == "BatchNormalization" and n.input[3] in seen and n.input[4] in seen
    ]


def write(
    model: CompiledModel, params: np.ndarray, out: Path, running: dict[str, np.ndarray]
) -> Path:
    """model.onnx with `params` and the `running` statistics as its initializers, saved to
    `out` and checked to load in onnxruntime."""
    source = onnx.load(str(model.folder / "model.onnx"))
    values = dict(model.layout.views(params))
    values.update(running)
    inits = {i.name: i for i in source.graph.initializer}
    missing = [n for n in values if n not in inits]
    if missing:
        raise CompileError(f"model.onnx has no initializer {missing[0]!r}: not the compiled one")
    for name, v in values.items():
        old = inits[name]
        shape = tuple(old.dims)
        dtype = numpy_helper.to_array(old).dtype
        new = numpy_helper.from_array(np.asarray(v).reshape(shape).astype(dtype), name)
        old.CopyFrom(new)
    for_inference(source.graph)  # a model exported in train mode, as deployed
    onnx.checker.check_model(source)
    onnx.save(source, str(out))
    return out
