"""`edgegossip export`: a checkpoint's model as a standard .onnx file."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.render import fail
from edgegossip.models import EXPORTABLE


@click.command()
@click.argument("checkpoint_dir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", type=click.Choice(EXPORTABLE), default="mlp", show_default=True)
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="Compare onnxruntime's predictions with NumPy's on the MNIST test set.",
)
@click.option("--json", "as_json", is_flag=True)
def export(checkpoint_dir: Path, output: Path, model: str, check: bool, as_json: bool) -> None:
    """Write the model in CHECKPOINT_DIR (an agent's output folder) to OUTPUT as ONNX."""
    import numpy as np

    from edgegossip import checkpoint
    from edgegossip.models import ONNX_MISSING, make_model, onnx_available

    if not onnx_available():
        fail(ONNX_MISSING, exit_codes.USAGE)
    from edgegossip.models.onnx_backend import export as write
    from edgegossip.models.onnx_backend import predict, softmax

    state = checkpoint.load(checkpoint_dir)
    if state is None:
        fail(f"{checkpoint_dir}: no checkpoint there", exit_codes.USAGE)
    m = make_model(model)
    if state["params"].shape != (m.n_params,):
        fail(
            f"{checkpoint_dir}: the checkpoint is not a {model} ({state['params'].size} params)",
            exit_codes.USAGE,
        )
    write(m, state["params"], output)
    result = {"output": str(output), "model": model, "n_params": m.n_params}
    if check:
        from edgegossip.data import mnist

        try:
            d = mnist.load()
        except mnist.DataError as e:
            fail(str(e), exit_codes.MISSING_DATA)
        ref = softmax(m.logits(state["params"], d.x_test))
        got = predict(output, d.x_test)
        result["max_abs_diff"] = float(np.abs(ref - got).max())
        result["same_class"] = float((ref.argmax(1) == got.argmax(1)).mean())
    click.echo(
        json.dumps(result)
        if as_json
        else f"wrote {output}"
        + (
            f"; max |onnxruntime - numpy| = {result['max_abs_diff']:.2e} on the test set"
            if check
            else ""
        )
    )
