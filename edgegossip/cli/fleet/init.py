"""`edgegossip fleet init DIR`: the fleet folder, from a count, a hosts file or Ansible."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import click

from edgegossip import exit_codes
from edgegossip.algorithms import DEFAULT as DEFAULT_ALGORITHM
from edgegossip.algorithms import NAMES as ALGORITHMS
from edgegossip.cli import options
from edgegossip.cli.render import emit, fail


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--devices",
    "count",
    type=click.IntRange(1, 65534),
    default=None,
    help="N devices named dev-0.. at placeholder addresses 192.0.2.x (edit them).",
)
@click.option(
    "--hosts",
    "hosts_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A file of lines NAME ADDRESS [USER] [PORT].",
)
@click.option(
    "--from-ansible",
    "ansible_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="An Ansible inventory, INI or YAML (hosts, groups, ansible_host/user/port).",
)
@click.option("--name", default=None, help="Fleet name (default: the folder's name).")
@click.option(
    "--ssh-key",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Use this private key instead of making a fleet key pair.",
)
@click.option(
    "--ssh-key-passphrase-file",
    "passphrase_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Protect the fleet's SSH key with the passphrase in this file (then `ssh-add` it: "
    "the fleet commands use it through your ssh-agent). The key is root on every device.",
)
@click.option("--user", default="pi", show_default=True, help="SSH user for --devices.")
@click.option(
    "--profile", default="", help="Device profile from devices/profiles for every device."
)
@click.option(
    "--model",
    default="mlp",
    show_default=True,
    help="mlp, logreg, cnn, or the folder of a compiled model (`edgegossip model compile`), "
    "which is copied into the fleet folder and shipped to every device by `fleet deploy`.",
)
@click.option(
    "--algorithm", type=click.Choice(ALGORITHMS), default=DEFAULT_ALGORITHM, show_default=True
)
@click.option(
    "--split",
    type=options.choice("partition"),
    default=None,
    help="Give each device its own file split from --data (data/device-ID.npz); "
    "without it every device is shipped the data set and trains on its id's shard.",
)
@options.dataset(
    "The data set the devices train on (their shards, or --split's files), from this "
    "machine's cache: `edgegossip data fetch NAME` first."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"fleet", "devices": [{"name", "address", "id"}], "secrets"}.',
)
def init(directory: Path, count, hosts_file, ansible_file, as_json, **opts) -> None:
    """Make a fleet folder: fleet.toml (the inventory; edit it freely) and secrets/ (0700)."""
    from edgegossip.artifact import ArtifactError
    from edgegossip.data.mnist import DataError
    from edgegossip.fleet import create
    from edgegossip.fleet.inventory import InventoryError
    from edgegossip.fleet.secrets import SecretsError

    given = [x for x in (count, hosts_file, ansible_file) if x is not None]
    if len(given) != 1:
        fail("give exactly one of --devices, --hosts, --from-ansible", exit_codes.USAGE)
    o = SimpleNamespace(**opts)
    try:
        f = create.create(
            directory,
            o.name or directory.resolve().name,
            _hosts(count, hosts_file, ansible_file, o.user),
            {"train": {"algorithm": o.algorithm, "model": o.model}, "data": {"source": o.data}},
            o.ssh_key,
            o.profile,
            o.split,
            progress=lambda m: click.echo(m, err=True),
            passphrase=o.passphrase_file.read_text().rstrip("\r\n") if o.passphrase_file else "",
        )
    except (InventoryError, SecretsError, DataError, ArtifactError) as e:
        fail(str(e), exit_codes.USAGE)
    except OSError as e:
        fail(f"{directory}: {e.strerror}", exit_codes.FAILURE)
    result = {
        "fleet": str(directory / "fleet.toml"),
        "secrets": str(f.secrets),
        "devices": [{"name": d.name, "address": d.address, "id": d.id} for d in f.devices],
    }
    if as_json:
        emit(result, True)
    else:
        click.echo(
            f"fleet {f.name} (id {f.id}): {len(f.devices)} devices in {result['fleet']}; "
            f"secrets in {f.secrets}"
        )


def _hosts(count, hosts_file, ansible_file, user: str) -> list[dict]:
    from edgegossip.fleet import ansible, create

    if count is not None:
        return [
            {"name": f"dev-{i}", "address": f"192.0.2.{i + 1}", "user": user} for i in range(count)
        ]
    if hosts_file is not None:
        return create.parse_hosts(hosts_file.read_text(), str(hosts_file))
    return ansible.load(ansible_file)


COMMANDS = [init]
