"""`edgegossip model compile`: an ONNX file compiled into the folder every agent of a fleet
trains from (the format: edgegossip/artifact.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from edgegossip.artifact import (
    FILES,
    MEMORY,
    PREFIX_FILES,
    Manifest,
    Prefix,
    Slot,
    State,
    write_manifest,
)
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
    (out / MEMORY).unlink(missing_ok=True)  # measured for what was here before, not this model
    onnx.save(c.train, str(out / "train.onnx"))
    onnx.save(inference_graph(c), str(out / "infer.onnx"))
    np.save(out / "initial.npy", c.initial.astype(np.float32))
    onnx.save(untied(model), str(out / "model.onnx"), save_as_external_data=False)
    files = FILES + (PREFIX_FILES if c.prefix is not None else ())
    if c.prefix is not None:
        onnx.save(c.prefix.features, str(out / PREFIX_FILES[0]))
        onnx.save(c.prefix.train.train, str(out / PREFIX_FILES[1]))
    manifest = _manifest(c, loss, source, files)
    written, digest = write_manifest(out, manifest)
    return {**written.to_json(), "digest": digest, "out": str(out)}


def _manifest(c: Compiled, loss: str, source: Path, files: tuple[str, ...]) -> Manifest:
    return Manifest(
        loss=loss,
        input_name=c.input_name,
        input_shape=tuple(int(d or 0) for d in c.input_shape),
        input_dtype=c.input_dtype,
        output_shape=tuple(int(d or 0) for d in c.output_shape),
        params=tuple(Slot(p.name, tuple(p.shape), p.offset) for p in c.params),
        opset=c.opset,
        onnxruntime=RUNTIMES[c.opset][0],
        state=tuple(State(o, i, tuple(s)) for o, i, s in c.state),
        prefix=None if c.prefix is None else Prefix(c.prefix.name, tuple(c.prefix.shape)),
        files=dict.fromkeys(files, ""),  # digests filled in when written
        source={"file": source.name, "sha256": sha256_of(source)},
        untrained=tuple(c.untrained),
        frozen=tuple(c.frozen),
        exporter_changes=tuple(c.exporter_changes),
        ops=tuple(c.ops),
    )


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
