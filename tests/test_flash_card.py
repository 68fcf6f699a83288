"""Issue 46: a card whose boot partition lacks issue.txt and the kernels is still judged by every
other marker it carries (config.txt, cmdline.txt, the Pi firmware's files, an image's root
partition), and a card whose system nothing tells is refused unless --target names it. Each
refusal is one line, exit 2, with nothing written."""

import json
import platform
import sys

import pytest

from edgegossip.flash import card
from tests.test_flash import flash, make_image, new_fleet, write_wheelhouse

PLAIN_CMDLINE = "root=/dev/mmcblk0p2 rootfstype=ext4 rootwait\n"
# the reporter's card (issue 46): a Pi's boot partition copied by hand, no issue.txt, no kernel
HAND_COPIED = {
    "cmdline.txt": "console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 "
    "rootfstype=ext4 rootwait\n",
    "config.txt": "[all]\narm_64bit=1\n",
    "user-data": "#cloud-config\n",
    "meta-data": "instance-id: x\n",
    "network-config": "network:\n  version: 2\n",
}
# Ubuntu Server for Raspberry Pi's boot partition, as its preinstalled image lays it out
UBUNTU_BOOT = {
    "cmdline.txt": "console=serial0,115200 dwc_otg.lpm_enable=0 console=tty1 root=LABEL=writable "
    "rootfstype=ext4 rootwait fixrtc quiet splash\n",
    "config.txt": "[all]\nkernel=vmlinuz\ncmdline=cmdline.txt\ninitramfs initrd.img followkernel\n"
    "[pi4]\nmax_framebuffers=2\narm_boost=1\n",
    "vmlinuz": "kernel\n",
    "initrd.img": "initrd\n",
    "start4.elf": "firmware\n",
    "fixup4.dat": "firmware\n",
    "bcm2711-rpi-4-b.dtb": "dtb\n",
    "overlays/README": "overlays\n",
    "user-data": "#cloud-config\n",
    "meta-data": "instance-id: ubuntu\n",
    "network-config": "network:\n  version: 2\n",
}
UBUNTU_ROOT = {
    "usr/lib/os-release": 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nID=ubuntu\n'
    "VERSION_CODENAME=noble\n",
    "usr/lib/aarch64-linux-gnu/libc.so.6": "elf\n",
}
# DietPi: Debian Bookworm for arm64 with its own boot partition (dietpi.txt, no issue.txt)
DIETPI_BOOT = {
    "cmdline.txt": "root=PARTUUID=2d2b1f0d-02 rootfstype=ext4 rootwait net.ifnames=0 quiet\n",
    "config.txt": "#---DietPi---\ndtparam=audio=off\ngpu_mem=16\n",
    "dietpi.txt": "AUTO_SETUP_LOCALE=C.UTF-8\n",
    "kernel8.img": "kernel\n",
}
DIETPI_ROOT = {
    "etc/os-release": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
    "VERSION_CODENAME=bookworm\n",
    "usr/lib/aarch64-linux-gnu/libc.so.6": "elf\n",
}


@pytest.fixture
def fleet(tmp_path):
    return new_fleet(tmp_path)


def boot_folder(tmp_path, files: dict[str, str]):
    boot = tmp_path / "bootfs"
    for name, text in files.items():
        (boot / name).parent.mkdir(parents=True, exist_ok=True)
        (boot / name).write_text(text)
    return boot


def snapshot(boot) -> dict:
    return {str(p.relative_to(boot)): p.read_bytes() for p in boot.rglob("*") if p.is_file()}


def refused(p, *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


@pytest.mark.parametrize(
    "files, marker",
    [
        ({"kernel8.img": "k"}, "kernel8.img"),
        ({"kernel_2712.img": "k"}, "kernel_2712.img"),
        ({"kernel7l.img": "k"}, "kernel7l.img"),
        ({"kernel.img": "k"}, "kernel.img"),
        ({"issue.txt": "Raspberry Pi reference 2024-11-19\n"}, "issue.txt"),
        ({"config.txt": "arm_64bit=1\n"}, "config.txt"),
        ({"config.txt": "dtoverlay=vc4-kms-v3d\n"}, "config.txt"),
        ({"config.txt": "[pi4]\nhdmi_force_hotplug=1\n"}, "config.txt"),
        ({"cmdline.txt": "console=serial0,115200 " + PLAIN_CMDLINE}, "console=serial0"),
        ({"overlays/README": "o"}, "overlays/*"),
        ({"bcm2710-rpi-zero-2-w.dtb": "d"}, "bcm27*.dtb"),
        ({"start4.elf": "f"}, "start*.elf"),
        ({"fixup_cd.dat": "f"}, "fixup*.dat"),
        ({"bootcode.bin": "f"}, "bootcode.bin"),
    ],
)
def test_each_marker_alone_refuses_a_wheelhouse_for_this_x86_machine(
    fleet, tmp_path, files, marker
):
    write_wheelhouse(fleet.root / "wheelhouse", "x86_64", "3.11")
    boot = boot_folder(tmp_path, {"cmdline.txt": PLAIN_CMDLINE, **files})
    before = snapshot(boot)
    p = flash(fleet, "pi0", "--boot", str(boot))
    refused(p, marker, "x86_64")
    assert snapshot(boot) == before
    # and the marker alone is what the card reader found
    text = {n: files.get(n, PLAIN_CMDLINE if n == "cmdline.txt" else "") for n in card.TEXT_FILES}
    assert card.read([*files, "cmdline.txt"], text)["markers"] == [marker]


def test_the_reporters_hand_copied_card(fleet, tmp_path):
    """The card of issue 46: x86_64 wheels refused; aarch64 wheels, whose Python the card cannot
    tell, refused until --target names a release that fits them."""
    write_wheelhouse(fleet.root / "wheelhouse", "x86_64", "3.11")
    boot = boot_folder(tmp_path, HAND_COPIED)
    before = snapshot(boot)
    refused(flash(fleet, "pi0", "--boot", str(boot)), "a Raspberry Pi's", "config.txt")
    write_wheelhouse(fleet.root / "wheelhouse", "aarch64", "3.11")
    refused(
        flash(fleet, "pi0", "--boot", str(boot)),
        "cannot tell the card's Python",
        "--target trixie-arm64|bookworm-arm64|this-machine",
    )
    refused(
        flash(fleet, "pi0", "--boot", str(boot), "--target", "trixie-arm64"),
        "Python 3.13",
        "fleet wheelhouse --for trixie-arm64",
    )
    refused(
        flash(fleet, "pi0", "--boot", str(boot), "--target", "this-machine"),
        "--target this-machine",
        "the card says aarch64",
    )
    assert snapshot(boot) == before
    p = flash(fleet, "pi0", "--boot", str(boot), "--target", "bookworm-arm64", "--json")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)
    assert row["named_target"] == "bookworm-arm64" and row["card"]["machine"] == "aarch64"
    assert (boot / "edgegossip" / "agent.toml").is_file()


def test_a_card_nothing_tells_is_refused_until_named(fleet, tmp_path):
    """A boot folder with no marker at all, and an image whose root partition is no ext4 (an
    unreadable one): refused naming what was looked for; --target this-machine flashes it."""
    write_wheelhouse(fleet.root / "wheelhouse", "x86_64", "3.11")
    boot = boot_folder(tmp_path, {"cmdline.txt": PLAIN_CMDLINE})
    refused(
        flash(fleet, "pi0", "--boot", str(boot)),
        "cannot tell the card's machine and Python",
        "looked for issue.txt, kernel*.img",
        "found: none",
    )
    img = make_image(tmp_path / "blank.img", {"cmdline.txt": PLAIN_CMDLINE})
    before = img.read_bytes()
    refused(flash(fleet, "pi0", "--image", str(img)), "found: none")
    assert img.read_bytes() == before
    write_wheelhouse(
        fleet.root / "wheelhouse",
        platform.machine(),
        f"{sys.version_info[0]}.{sys.version_info[1]}",
    )
    p = flash(fleet, "pi0", "--boot", str(boot), "--target", "this-machine", "--json")
    assert p.returncode == 0, p.stderr


def test_an_image_root_partition_tells_a_derivatives_system(fleet, tmp_path):
    """DietPi (Debian Bookworm arm64, no issue.txt): its root's os-release names the release.
    Ubuntu for Pi: its root says aarch64 but a release we do not know, so its Python needs
    --target; x86_64 wheels are refused by its boot partition alone."""
    dietpi = make_image(tmp_path / "dietpi.img", DIETPI_BOOT, root=DIETPI_ROOT)
    write_wheelhouse(fleet.root / "wheelhouse", "aarch64", "3.13")
    refused(
        flash(fleet, "pi0", "--image", str(dietpi)),
        "is Debian GNU/Linux 12 (bookworm) (aarch64 Python 3.11 glibc 2.36)",
    )
    write_wheelhouse(fleet.root / "wheelhouse", "aarch64", "3.11")
    p = flash(fleet, "pi0", "--image", str(dietpi), "--json")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)["card"]
    assert (row["machine"], row["python"], row["markers"][-1]) == (
        "aarch64",
        "3.11",
        "root os-release",
    )

    ubuntu = make_image(tmp_path / "ubuntu.img", UBUNTU_BOOT, root=UBUNTU_ROOT)
    refused(flash(fleet, "pi1", "--image", str(ubuntu)), "cannot tell the card's Python")
    write_wheelhouse(fleet.root / "wheelhouse", "x86_64", "3.11")
    refused(
        flash(fleet, "pi1", "--image", str(ubuntu)),
        "start*.elf",
        "fixup*.dat",
        "bcm27*.dtb",
        "overlays/*",
        "console=serial0",
    )


def test_the_root_partition_read_without_mounting(tmp_path):
    from edgegossip.flash import rootfs

    img = make_image(tmp_path / "u.img", UBUNTU_BOOT, root=UBUNTU_ROOT)
    assert rootfs.read(str(img)) == {
        "os": "Ubuntu 24.04.1 LTS",
        "codename": "noble",
        "machine": "aarch64",
    }
    assert rootfs.read(str(make_image(tmp_path / "z.img", {"cmdline.txt": "x\n"}))) is None
    assert rootfs.parse_os_release('# c\nA="b c"\nD=e\n\nbad\n') == {"A": "b c", "D": "e"}
