"""`edgegossip model compile MODEL.onnx`: the user's own model, made trainable on a fleet."""

from __future__ import annotations

import json
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.render import emit, fail


@click.group()
def model() -> None:
    """The user's own models: compiled here, trained on the devices."""


@model.command()
@click.argument("source", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--loss",
    type=click.Choice(["cross-entropy", "mse"]),
    required=True,
    help="cross-entropy: y holds class indices (a final Softmax or LogSoftmax is folded into "
    "it); mse: y holds targets in the output's shape.",
)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--freeze",
    multiple=True,
    metavar="GLOB",
    help="Keep the weights whose names match as exported (repeatable; the names are the "
    "module paths the exporter gave, e.g. 'backbone.*'). A BatchNorm frozen whole normalises "
    "with its running statistics, as PyTorch's eval() does.",
)
@click.option(
    "--train",
    "train_only",
    multiple=True,
    metavar="GLOB",
    help="Train only the weights whose names match (repeatable); the others are frozen.",
)
@click.option(
    "--accept-untrained",
    is_flag=True,
    help="Compile even where a weight of the model would stay as exported (it reaches the "
    "loss only through an op the compiler does not differentiate); the manifest lists them.",
)
@click.option(
    "--batch",
    type=click.IntRange(1, 65536),
    help="Also measure a training step's peak memory at this batch (and at batch 1), as a "
    "device's agent runs it, and keep both in OUT/memory.json: an agent refuses a batch its "
    "board cannot hold.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the manifest: {"format", "source": {"file", "sha256"}, "loss", "input": '
    '{"name", "shape", "dtype"}, "output": {"shape"}, "classes", "params": {"count", '
    '"layout"}, "state", "untrained", "frozen", "exporter_changes" (one line each), "ops", '
    '"opset", "onnxruntime", "files", "digest", "out"} (with --batch, "memory": '
    '{"compiled" [, "compiled-prefix"]: {BATCH: peak MB}}).',
)
def compile(
    source: Path,
    loss: str,
    out: Path,
    freeze: tuple[str, ...],
    train_only: tuple[str, ...],
    accept_untrained: bool,
    batch: int | None,
    as_json: bool,
) -> None:
    """Compile SOURCE, an inference ONNX model (torch.onnx.export's, opset 13 or later, its
    initializers the parameters), into OUT: one training graph of standard ONNX ops (loss and
    gradient), an inference graph, the initial weights and a manifest. Runs on the operator's
    machine: a device then needs nothing but stock onnxruntime and NumPy. An op without a
    gradient rule is refused here, naming the node."""
    from edgegossip.models import ONNX_MISSING, onnx_available

    if not onnx_available():
        fail(ONNX_MISSING, exit_codes.USAGE)
    from edgegossip.artifact import MEMORY
    from edgegossip.compiler.build import Choice
    from edgegossip.compiler.write import compile_file
    from edgegossip.models.footprint import CACHED

    choice = Choice(freeze, train_only, accept_untrained)
    manifest = compile_file(source, loss, out, choice)  # CompileError: one line, exit 2
    if batch is not None:
        from edgegossip.bench.train import step_peaks
        from edgegossip.models import footprint

        fp = footprint.write(out, step_peaks(str(out), tuple(sorted({1, batch}))))
        manifest["memory"] = fp.to_json()
    if as_json:
        emit(manifest, True)
        return
    shape = "x".join(str(d) for d in manifest["input"]["shape"])
    layout = manifest["params"]["layout"]
    click.echo(
        f"{source.name}: {manifest['params']['count']:,} parameters in {len(layout)} tensors, "
        f"input {shape}, opset {manifest['opset']} (onnxruntime {manifest['onnxruntime']} or "
        f"later); compiled to {out} (digest {manifest['digest'][:12]})"
    )
    click.echo("trains: " + _listed([f"{t['name']} {t['shape']}" for t in layout]))
    if manifest["frozen"]:
        click.echo("frozen: " + _listed(manifest["frozen"]))
    if manifest["untrained"]:
        click.echo("left as exported (--accept-untrained): " + _listed(manifest["untrained"]))
    for line in manifest["exporter_changes"]:
        click.echo(f"note: {line}")
    for way, peaks in manifest.get("memory", {}).items():
        how = "on its prefix's outputs" if way == CACHED else "whole"
        click.echo(
            f"memory: a training step {how} at batch {batch} peaks at {peaks[str(batch)]:.0f} MB "
            f"(batch 1: {peaks['1']:.0f} MB), onnxruntime on one thread here; kept in "
            f"{out / MEMORY}"
        )


def _listed(names: list[str], most: int = 8) -> str:
    shown = ", ".join(names[:most])
    return shown + (
        f" and {len(names) - most} more (--json lists all)" if len(names) > most else ""
    )


@model.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print [{"op", "gradient_to" (input slots; [] for all), "in_training" ("inference" '
    'or "its own"), "cases"}].',
)
def ops(as_json: bool) -> None:
    """The ops `model compile` differentiates: one row each (compiler/ops.py), the inputs a
    gradient flows to, whether it runs otherwise in training, and the graphs that check it.
    docs/ops.md gives each rule's math."""
    from edgegossip.models import ONNX_MISSING, onnx_available

    if not onnx_available():
        fail(ONNX_MISSING, exit_codes.USAGE)
    from edgegossip.cli.render import table
    from edgegossip.compiler.ops import OPS, copy_node

    rows: list[dict] = [
        {
            "op": name,
            "gradient_to": list(row.diff),
            "in_training": "inference" if row.forward is copy_node else "its own",
            "cases": len(row.cases),
        }
        for name, row in sorted(OPS.items())
    ]
    if as_json:
        click.echo(json.dumps(rows))
        return
    shown = [{**r, "gradient_to": ", ".join(map(str, r["gradient_to"])) or "all"} for r in rows]
    click.echo(table(shown, ["op", "gradient_to", "in_training", "cases"]))
    click.echo(f"{len(rows)} ops; each rule's math: docs/ops.md")
