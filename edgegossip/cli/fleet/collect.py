"""`edgegossip fleet collect --out DIR`: every device's model and metrics, scored and averaged."""

from __future__ import annotations

from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import exit_for, fleet_options, open_fleet, select
from edgegossip.cli.render import emit, fail, score, table
from edgegossip.fleet.evaluation import TESTS


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--live", is_flag=True, help="Ask each running agent for a checkpoint of this moment first."
)
@click.option(
    "--test",
    type=click.Choice(TESTS),
    default=None,
    help="Score the models on this data set's test split, or on the held-out rows of the "
    "devices' own files (default: held-out where devices have files, else the fleet's data "
    "set).",
)
@fleet_options(timeout=300)
def collect(out, live, test, fleet_dir, as_json, concurrency, timeout_s, only) -> None:
    """Fetch each device's latest checkpoint and metrics into OUT/agentID/, score each model and
    their average on the test set (--test), write the average as OUT/average.onnx (a compiled
    model: the user's own ONNX file with the averaged parameters and BatchNorm statistics
    estimated from training data), and write
    OUT/summary.json, the plots `emulate` draws (PNG and SVG) and OUT/report.html.

    --json: {"average_model_accuracy", "average_model_mse" (a model trained with mse: its test
    error, accuracy null), "onnx" (path or null), "onnx_error", "model", "fleet",
    "observed_loss", "plots", "report", "devices": [{"name", "ok", "error", "agent", "accuracy",
    "mse", "step", "peak_rss_mb", "seconds"}], ...}"""
    from edgegossip.data.mnist import DataError
    from edgegossip.errors import UsageError
    from edgegossip.fleet.collect import collect as run
    from edgegossip.report import plot

    f = open_fleet(fleet_dir)
    try:
        plot.require()
    except UsageError as e:
        fail(str(e), exit_codes.USAGE)
    try:
        s = run(f, select(f, only), out, live, concurrency, timeout_s, test)
    except DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    if as_json:
        emit(s, True)
    else:
        score_of = "mse" if s.get("average_model_mse") is not None else "accuracy"
        click.echo(
            table(s["devices"], ["name", "ok", "agent", score_of, "step", "peak_rss_mb", "error"])
        )
        average = score(s["average_model_accuracy"], s.get("average_model_mse"))
        click.echo(
            f"average model: test {average}; "
            f"onnx: {s['onnx'] or s['onnx_error']}; report: {s['report']}"
        )
    exit_for(s["devices"])


COMMANDS = [collect]
