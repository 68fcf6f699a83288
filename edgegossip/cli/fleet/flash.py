"""`edgegossip fleet flash NAME`: first-boot files for one device onto its SD card or image."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import click

from edgegossip import exit_codes
from edgegossip.cli.fleet import open_fleet
from edgegossip.cli.render import emit, fail
from edgegossip.flash.card import TARGET_NAMES
from edgegossip.flash.firstboot import FORMATS


@click.command()
@click.argument("name")
@click.option(
    "--fleet",
    "fleet_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
)
@click.option(
    "--boot",
    "boot_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A mounted boot partition.",
)
@click.option(
    "--image",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A Raspberry Pi OS .img, edited in place (no root, no mounting).",
)
@click.option(
    "--device",
    "disk",
    type=click.Path(exists=True, dir_okay=False),
    help="A removable disk, e.g. /dev/sdb (refused if not removable or in use).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Override the detection (cloud-init: Trixie images; firstrun: Bookworm).",
)
@click.option("--wifi-ssid", default=None)
@click.option("--wifi-country", default=None, help="Two-letter regulatory domain, e.g. GB.")
@click.option(
    "--wifi-psk-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A file holding the passphrase (never on the command line); stored hashed.",
)
@click.option(
    "--wheelhouse",
    "wheel_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Wheels for the device's platform (`fleet wheelhouse --for TARGET`); default "
    "FLEET/wheelhouse.",
)
@click.option(
    "--target",
    type=click.Choice(TARGET_NAMES),
    default=None,
    help="The system the card runs, where its boot partition does not tell it (a boot folder "
    "copied by hand, a derivative's image); the card's own markers must agree.",
)
@click.option(
    "--over-another-device",
    "over_another",
    is_flag=True,
    help="Flash a card that still carries another device's bundle (its secrets may linger in "
    "the card's free space: better a fresh image).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"name", "format", "detected", "target", "instance_id", "wifi", "files", '
    '"release", "platform", "card": {"os", "date", "machine", "python", "glibc", '
    '"raspberry_pi", "markers"}, "named_target", "host_key"}.',
)
def flash(name, fleet_dir, as_json, **card) -> None:
    """Write what device NAME needs on first boot: hostname, a user with the fleet's SSH key and
    no password, SSH, Wi-Fi, and the agent installed from the card with its config, keys, data
    and unit, started at once (it waits for the clock itself, a bounded time). The bundle,
    secrets included, is deleted from the boot partition once installed.

    The card's system is read from its boot partition (issue.txt's image date, the kernels,
    config.txt, cmdline.txt, the Pi firmware's files) and an image's root partition
    (os-release): a wheelhouse for another machine, Python or a newer glibc is refused, exit 2,
    before anything is written, and so is a card whose machine and Python nothing tells, unless
    --target names them."""
    from edgegossip.errors import EdgegossipError
    from edgegossip.flash import boot
    from edgegossip.flash import disk as disks
    from edgegossip.flash.write import flash as write
    from edgegossip.fleet import bundle

    c = SimpleNamespace(**card)
    if sum(x is not None for x in (c.boot_dir, c.image, c.disk)) != 1:
        fail("give exactly one of --boot, --image, --device", exit_codes.USAGE)
    f = open_fleet(fleet_dir)
    try:
        d = f.device(name)
        creds = _wifi(c.wifi_ssid, c.wifi_country, c.wifi_psk_file)
        wheels = c.wheel_dir or f.root / "wheelhouse"
        manifest = bundle.load(wheels)
        if c.disk is not None:
            disks.check(c.disk)
        medium = boot.DirBoot(c.boot_dir) if c.boot_dir else boot.FatBoot(Path(c.image or c.disk))
        row = write(f, d, medium, c.fmt, creds, wheels, manifest, c.over_another, c.target)
    except (EdgegossipError, ValueError) as e:  # all of them the operator's to fix: usage
        fail(str(e), exit_codes.USAGE)
    except OSError as e:
        fail(f"{e.filename or name}: {e.strerror}", exit_codes.FAILURE)
    if as_json:
        emit(row, True)
    else:
        click.echo(
            f"{name}: {row['format']} first boot written to {row['target']} "
            f"({len(row['files'])} files, release {row['release']})"
        )


def _wifi(ssid, country, psk_file) -> tuple[str, str, str] | None:
    """(ssid, hashed psk, country) from the options, None without Wi-Fi."""
    from edgegossip.flash import wifi

    if not (ssid or psk_file or country):
        return None
    if not (ssid and psk_file and country):
        raise ValueError("Wi-Fi needs --wifi-ssid, --wifi-country and --wifi-psk-file together")
    passphrase = psk_file.read_text().rstrip("\r\n")
    return ssid, wifi.psk(ssid, passphrase), wifi.check_country(country)


COMMANDS = [flash]
