"""Prints docs/own-model.md's zoo table: each export of tests/fixtures/zoo compiled and run in
stock onnxruntime (float32) on PyTorch's batch, against PyTorch's loss and gradients.

    .venv/bin/python scripts/zoo-table.py

"largest gradient error": over the tensors whose PyTorch gradient exceeds 1e-5, the largest
|ours - PyTorch's| over that tensor's largest PyTorch gradient."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edgegossip.compiler.build import compile_model
from edgegossip.compiler.errors import CompileError

ZOO = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "zoo"


def row(name: str) -> str:
    model, exporter = name.rsplit("-", 1)
    ref = np.load(ZOO / f"{name}.npz")
    theirs = sum(ref[k].size for k in ref.files if k.startswith("grad/"))
    loss = str(ref["loss_kind"])
    try:
        c = compile_model(onnx.load(str(ZOO / f"{name}.onnx")), loss)
    except CompileError as e:
        return f"| {model} | {exporter} | {loss} | refused: `{e}` | - ({theirs:,}) | - | - |"
    sess = ort.InferenceSession(c.train.SerializeToString(), providers=["CPUExecutionProvider"])
    value, grad = sess.run(["loss", "grad"], {"params": c.initial, "x": ref["x"], "y": ref["y"]})
    loss_err = abs(float(value) - float(ref["loss"])) / abs(float(ref["loss"]))
    worst = 0.0
    for p in c.params:
        want = ref[f"grad/{p.name}"]
        top = float(np.abs(want).max())
        if top > 1e-5:
            got = grad[p.offset : p.offset + p.size].reshape(p.shape)
            worst = max(worst, float(np.abs(got - want).max()) / top)
    ours = sum(p.size for p in c.params)
    return (
        f"| {model} | {exporter} | {loss} | yes | {ours:,} ({theirs:,}) "
        f"| {loss_err:.1e} | {worst:.1e} |"
    )


def main() -> None:
    names = sorted(json.loads((ZOO / "zoo.json").read_text())["models"])
    print(
        "| model | exporter | loss | compiled | parameters (PyTorch's) | loss error "
        "| largest gradient error |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        print(row(name))


if __name__ == "__main__":
    main()
