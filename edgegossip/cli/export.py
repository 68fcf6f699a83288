"""`edgegossip export`: a checkpoint's model as a standard .onnx file."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli import options
from edgegossip.cli.render import fail
from edgegossip.models import EXPORTABLE


@click.command()
@click.argument("checkpoint_dir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--model",
    default="mlp",
    show_default=True,
    help=f"{', '.join(EXPORTABLE)}, or a compiled model's folder: its own ONNX file is written "
    "with the checkpoint's parameters (BatchNorm statistics estimated from --data).",
)
@options.dataset("The data set of the check, and of a compiled model's BatchNorm statistics.")
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="Compare onnxruntime's predictions with the trained model's on the test set.",
)
@click.option("--json", "as_json", is_flag=True)
def export(
    checkpoint_dir: Path, output: Path, model: str, data: str, check: bool, as_json: bool
) -> None:
    """Write the model in CHECKPOINT_DIR (an agent's output folder) to OUTPUT as ONNX.

    --json: {"output", "model", "n_params", "max_abs_diff" (of the probabilities; null for a
    compiled model, whose file may end elsewhere), "same_class" (share of test examples given
    the same class)}"""
    import numpy as np

    from edgegossip import checkpoint
    from edgegossip.data import mnist
    from edgegossip.models import ONNX_MISSING, make_model, onnx_available

    if not onnx_available():
        fail(ONNX_MISSING, exit_codes.USAGE)
    from edgegossip.models.onnx_backend import predict, softmax

    state = checkpoint.load(checkpoint_dir)
    if state is None:
        fail(f"{checkpoint_dir}: no checkpoint there", exit_codes.USAGE)
    try:
        m = make_model(model)
        d = mnist.load(name=data) if check or m.digest is not None else None
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    except mnist.DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    if state["params"].shape != (m.n_params,):
        fail(
            f"{checkpoint_dir}: the checkpoint is not a {model} ({state['params'].size} params)",
            exit_codes.USAGE,
        )
    try:
        checkpoint.check_model(state, m.digest)
    except checkpoint.CheckpointError as e:
        fail(f"{checkpoint_dir}: {e}", exit_codes.USAGE)
    _write(m, model, state["params"], output, d)
    result = {"output": str(output), "model": model, "n_params": m.n_params}
    if check and d is not None:
        trained = m.logits(state["params"], d.x_test)
        if m.digest is None:
            got = predict(output, d.x_test)
            result["max_abs_diff"] = float(np.abs(softmax(trained) - got).max())
        else:
            got = _run(output, m, d.x_test)
            result["max_abs_diff"] = None
        result["same_class"] = float((trained.argmax(1) == got.argmax(1)).mean())
    click.echo(
        json.dumps(result)
        if as_json
        else f"wrote {output}"
        + (f"; the same class as the trained model for {result['same_class']:.2%}" if check else "")
    )


def _write(m, name: str, params, output: Path, d) -> None:
    from edgegossip.models import EXPORTABLE

    if m.digest is not None:
        from edgegossip.models import writeback
        from edgegossip.models.compiled import calibration

        batches = calibration(d.batch, len(d.y_train))
        writeback.write(m, params, output, writeback.running_statistics(m, params, batches))
    elif name in EXPORTABLE:
        from edgegossip.models.onnx_backend import export as write

        write(m, params, output)
    else:
        fail(f"--model {name}: ONNX export covers {', '.join(EXPORTABLE)} and compiled models", 2)


def _run(path: Path, m, x):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: m._batch(x)})[0]
