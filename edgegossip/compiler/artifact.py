"""A compiled model on disk: the folder `edgegossip model compile` writes and every agent of a
fleet trains from.

    DIR/manifest.json   what the model is (MANIFEST_KEYS), and each file's SHA-256
    DIR/train.onnx      params, x, y -> loss, grad, logits, BatchNorm batch statistics
    DIR/infer.onnx      params, x -> logits (BatchNorm on the batch's statistics, no dropout)
    DIR/initial.npy     the exported weights, flat float32, laid out as params
    DIR/features.onnx   (a model fine-tuned after a frozen prefix) x -> the prefix's output,
    DIR/train-cached.onnx   and that output, y -> loss, grad: compiler/prefix.py
    DIR/model.onnx      the user's own inference model: `fleet collect` writes the trained
                        parameters back into it. As given, but in one file (an exporter's
                        external data, NAME.onnx.data, read in) and with each weight the
                        training graph trains under its own name (build.untied)

The artifact's digest is the SHA-256 of manifest.json, which names every other file's digest:
two devices with the same digest train the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx

from edgegossip.compiler.build import (
    RUNTIMES,
    Choice,
    Compiled,
    ancestors,
    compile_model,
    untied,
)
from edgegossip.compiler.errors import CompileError
from edgegossip.paths import sha256_of

FORMAT = "edgegossip-model/1"
MANIFEST = "manifest.json"
FILES = ("train.onnx", "infer.onnx", "initial.npy", "model.onnx")
PREFIX_FILES = ("features.onnx", "train-cached.onnx")  # with a frozen prefix (prefix.py)
MAX_MODEL_BYTES = 1 << 30  # what `model compile` reads at the most


def compile_file(source: Path, loss: str, out: Path, choice: Choice | None = None) -> dict:
    """Compile the ONNX file `source` under `loss` into the folder `out`; the manifest."""
    try:
        size = source.stat().st_size
    except OSError as e:
        raise CompileError(f"{source}: {e.strerror}") from None
    if size > MAX_MODEL_BYTES:
        raise CompileError(f"{source}: {size} bytes; a device model is far smaller")
    try:
        model = onnx.load(str(source))  # with external data, from beside it
    except Exception as e:  # protobuf's DecodeError, a missing .onnx.data, the loader's own
        raise CompileError(f"{source}: not an ONNX model ({str(e).splitlines()[0]})") from None
    if model.ByteSize() > MAX_MODEL_BYTES:
        raise CompileError(f"{source}: {model.ByteSize()} bytes with its data; too large")
    c = compile_model(model, loss, choice or Choice())
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(c.train, str(out / "train.onnx"))
    onnx.save(inference_graph(c), str(out / "infer.onnx"))
    np.save(out / "initial.npy", c.initial.astype(np.float32))
    onnx.save(untied(model), str(out / "model.onnx"), save_as_external_data=False)
    manifest = _manifest(c, loss, source)
    files = list(FILES)
    if c.prefix is not None:
        onnx.save(c.prefix.features, str(out / PREFIX_FILES[0]))
        onnx.save(c.prefix.train.train, str(out / PREFIX_FILES[1]))
        files += PREFIX_FILES
        manifest["prefix"] = {"input": c.prefix.name, "shape": c.prefix.shape}
    manifest["files"] = {name: sha256_of(out / name) for name in files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return {**manifest, "digest": sha256_of(out / MANIFEST), "out": str(out)}


def _manifest(c: Compiled, loss: str, source: Path) -> dict:
    return {
        "format": FORMAT,
        "source": {"file": source.name, "sha256": sha256_of(source)},
        "loss": loss,
        "input": {"name": c.input_name, "shape": c.input_shape, "dtype": c.input_dtype},
        "output": {"shape": c.output_shape},
        "classes": c.output_shape[0] if loss == "cross-entropy" else None,
        "params": {
            "count": int(sum(p.size for p in c.params)),
            "layout": [
                {"name": p.name, "shape": list(p.shape), "offset": p.offset} for p in c.params
            ],
        },
        "state": [{"output": o, "initializer": i, "shape": list(s)} for o, i, s in c.state],
        "untrained": c.untrained,  # weights left as exported, by the user's choice
        "frozen": c.frozen,  # weights the user froze (--freeze, --train)
        "exporter_changes": c.exporter_changes,  # what the export changed of the model
        "ops": c.ops,
        "opset": c.opset,
        "onnxruntime": RUNTIMES[c.opset][0],  # the oldest that runs it (fleet deploy checks)
        "files": {},
    }


def inference_graph(c: Compiled) -> onnx.ModelProto:
    """infer.onnx: the training graph's forward half, without loss or gradient, with Dropout as
    the identity it is at inference."""
    from onnx import helper

    g = c.train.graph
    needed = ancestors(g.output[2].name, {o: n for n in g.node for o in n.output})
    nodes = []
    for node in g.node:
        if not set(node.output) & needed:
            continue
        if node.op_type == "Dropout":
            node = helper.make_node("Identity", [node.input[0]], [node.output[0]])
        nodes.append(node)
    inits = [i for i in g.initializer if i.name in needed]
    inputs = [i for i in g.input if i.name in needed]
    graph = helper.make_graph(nodes, "edgegossip_infer", inputs, [g.output[2]], inits)
    m = helper.make_model(graph, opset_imports=list(c.train.opset_import))
    m.ir_version = c.train.ir_version
    onnx.checker.check_model(m)
    return m
