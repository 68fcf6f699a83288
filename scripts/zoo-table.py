"""Prints docs/own-model.md's zoo table: each export of tests/fixtures/zoo compiled and run in
stock onnxruntime (float32) on PyTorch's batch, against PyTorch's loss and gradients.

    .venv/bin/python scripts/zoo-table.py [--speed TORCH_PYTHON] [EXPORT ...]

(EXPORTs, such as attention-dynamo: only their rows.)

With --speed, a last column: the compiled step's time at batch 32 over PyTorch's for the same
class and batch (edgegossip bench train --reference, one thread each, best of 3 x 60 steps, each
in a fresh process), TORCH_PYTHON being a Python that has torch (the zoo's script, which
defines the classes, is loaded there).

"largest gradient error": over the tensors whose PyTorch gradient exceeds 1e-5, the largest
|ours - PyTorch's| over that tensor's largest PyTorch gradient."""

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from edgegossip.compiler.build import compile_model
from edgegossip.compiler.errors import CompileError

ZOO = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "zoo"


SCRIPT = Path(__file__).resolve().parent / "make-model-zoo.py"
# the reference child instantiates FILE.py:CLASS with no argument: a shim names the zoo's entry
SHIM = """import importlib.util
spec = importlib.util.spec_from_file_location("zoo", {script!r})
zoo = importlib.util.module_from_spec(spec); spec.loader.exec_module(zoo)
Model = zoo.ZOO[{model!r}][0]
"""


def speed(name: str, c, loss: str, torch_python: str) -> str:
    """The compiled step over PyTorch's at batch 32, as `bench train --reference` measures it."""
    from edgegossip.bench import train
    from edgegossip.compiler.write import compile_file

    model = name.rsplit("-", 1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "compiled"
        compile_file(ZOO / f"{name}.onnx", loss, folder)
        shim = Path(tmp) / "shim.py"
        shim.write_text(SHIM.format(script=str(SCRIPT), model=model))
        ours = train.run(cases=[(str(folder), "compiled")], batches=(32,))
        got = train.against(ours, str(folder), f"{shim}:Model", torch_python, 60, (32,))
    return f"{got['results'][0]['vs_reference']:.2f}x"


def row(name: str, torch_python: str | None = None) -> str:
    model, exporter = name.rsplit("-", 1)
    ref = np.load(ZOO / f"{name}.npz")
    theirs = sum(ref[k].size for k in ref.files if k.startswith("grad/"))
    loss = str(ref["loss_kind"])
    try:
        c = compile_model(onnx.load(str(ZOO / f"{name}.onnx")), loss)
    except CompileError as e:
        return f"| {model} | {exporter} | {loss} | refused: `{e}` | - ({theirs:,}) | - | - |" + (
            " - |" if torch_python else ""
        )
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
    out = (
        f"| {model} | {exporter} | {loss} | yes | {ours:,} ({theirs:,}) "
        f"| {loss_err:.1e} | {worst:.1e} |"
    )
    return out + (f" {speed(name, c, loss, torch_python)} |" if torch_python else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", metavar="TORCH_PYTHON", help="a Python with torch")
    ap.add_argument("exports", nargs="*", help="only these rows (NAME-EXPORTER)")
    args = ap.parse_args()
    names = sorted(json.loads((ZOO / "zoo.json").read_text())["models"])
    names = [n for n in names if n in args.exports] if args.exports else names
    head = "| model | exporter | loss | compiled | parameters (PyTorch's) | loss error "
    head += "| largest gradient error |"
    rule = "|---|---|---|---|---|---|---|"
    if args.speed:
        head, rule = head + " step at batch 32 / PyTorch's |", rule + "---|"
    print(head)
    print(rule)
    for name in names:
        print(row(name, args.speed), flush=True)


if __name__ == "__main__":
    main()
