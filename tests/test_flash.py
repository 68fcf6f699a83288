"""`fleet flash` into real disk images (MBR + FAT, edited through mtools) for both first-boot
formats, every file read back; user-data checked by cloud-init's own schema validator and
network-config by cloud-init's own parser; firstrun.sh by bash -n and shellcheck."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgegossip import paths
from edgegossip.flash import disk, partitions
from edgegossip.flash.boot import FatBoot
from edgegossip.fleet import bundle, create

PASSPHRASE = "correct horse battery staple"
CMDLINE = "console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 rootfstype=ext4 fsck.repair=yes rootwait quiet\n"


def make_image(
    path: Path, files: dict[str, str], fat_mb: int = 48, root: dict[str, str] | None = None
) -> Path:
    """A disk image as Raspberry Pi OS ships it: MBR, a FAT32 boot partition at 4 MiB, a root
    partition: ext4 holding the files of `root` (made by mkfs.ext4 -d, no mount), or 1 MiB of
    zeros when root is None."""
    part = path.with_suffix(".fat")
    subprocess.run(
        ["mkfs.vfat", "-F", "32", "-n", "bootfs", "-C", str(part), str(fat_mb * 1024)],
        check=True,
        capture_output=True,
    )
    start, sectors = 8192, fat_mb * 1024 * 2
    rootfs = b""
    if root is not None:
        tree = path.with_name(path.name + ".root")
        for name, text in root.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_text(text)
        ext4 = path.with_suffix(".ext4")
        subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-d", str(tree), str(ext4), "4M"],
            check=True,
            capture_output=True,
        )
        rootfs = ext4.read_bytes()
        ext4.unlink()
    root_sectors = max(2048, len(rootfs) // 512)
    with open(path, "wb") as f:
        f.write(partitions.mbr([(0x0C, start, sectors), (0x83, start + sectors, root_sectors)]))
        f.seek(start * 512)
        f.write(part.read_bytes())
        f.seek((start + sectors) * 512)
        f.write(rootfs)
        f.seek((start + sectors + root_sectors) * 512 - 1)
        f.write(b"\0")
    part.unlink()
    for name, text in files.items():
        src = path.with_name("src-" + name.replace("/", "_"))
        src.write_text(text)
        if "/" in name:
            subprocess.run(
                ["mmd", "-i", f"{path}@@{start * 512}", "::/" + name.rsplit("/", 1)[0]],
                env={"MTOOLS_SKIP_CHECK": "1", "PATH": "/usr/bin:/bin"},
                capture_output=True,
            )
        subprocess.run(
            ["mcopy", "-i", f"{path}@@{start * 512}", str(src), f"::/{name}"],
            check=True,
            env={"MTOOLS_SKIP_CHECK": "1", "PATH": "/usr/bin:/bin"},
        )
    return path


# the kernels a 64-bit Raspberry Pi OS image carries (flash/card.py reads them)
ARM64 = {"kernel8.img": "kernel\n", "kernel_2712.img": "kernel\n"}
TRIXIE = {
    **ARM64,
    "cmdline.txt": CMDLINE,
    "config.txt": "arm_64bit=1\n",
    "issue.txt": "Raspberry Pi reference 2025-10-01\n",
    "user-data": "#cloud-config\n",
    "meta-data": "instance-id: rpios-image\n",
    "network-config": "network:\n  version: 2\n",
}
BOOKWORM = {
    **ARM64,
    "cmdline.txt": CMDLINE,
    "config.txt": "arm_64bit=1\n",
    "issue.txt": "Raspberry Pi reference 2024-11-19\nGenerated using pi-gen, stage2, bookworm\n",
}


@pytest.fixture
def fleet(tmp_path):
    return new_fleet(tmp_path)


def new_fleet(tmp_path):
    """Three Pis in an inventory, an aarch64 Python 3.11 wheelhouse, a Wi-Fi passphrase file."""
    hosts = [{"name": f"pi{i}", "address": f"192.0.2.{i + 1}", "user": "pi"} for i in range(3)]
    f = create.create(
        tmp_path / "fleet",
        "flashme",
        hosts,
        {"train": {"model": "logreg"}},
        progress=lambda m: None,
    )
    write_wheelhouse(tmp_path / "fleet" / "wheelhouse", "aarch64", "3.11")
    (tmp_path / "psk").write_text(PASSPHRASE + "\n")
    return f


def write_wheelhouse(wh: Path, machine: str, python: str) -> None:
    """A wheelhouse of one (fake) wheel for that platform, its manifest as `fleet wheelhouse`
    writes it."""
    wh.mkdir(exist_ok=True)
    for old in wh.iterdir():
        old.unlink()
    tag = "cp" + python.replace(".", "")
    wheel = f"edgegossip-0.1.0-{tag}-{tag}-linux_{machine}.whl"
    (wh / wheel).write_bytes(b"PK\x03\x04 wheel bytes")
    digests = {wheel: paths.sha256_of(wh / wheel)}
    (wh / bundle.MANIFEST).write_text(
        json.dumps(
            {
                "release": bundle.release_of(digests),
                "platform": {"machine": machine, "python": python},
                "wheels": [wheel],
                "sha256": digests,
                "extras": [],
            }
        )
    )


def flash(fleet, *args):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "edgegossip.cli.app",
            "fleet",
            "flash",
            "--fleet",
            str(fleet.root),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def wifi(tmp_path):
    return ["--wifi-ssid", "farm", "--wifi-country", "gb", "--wifi-psk-file", str(tmp_path / "psk")]


def read_all(img: Path) -> dict[str, bytes]:
    b = FatBoot(img)
    return {n: b.read(n) for n in b.names()}


def check_bundle(files: dict[str, bytes], fleet, name: str) -> None:
    d = fleet.device(name)
    import tomllib

    conf = tomllib.loads(files["edgegossip/agent.toml"].decode())
    assert conf["agent"]["id"] == d.id and conf["agent"]["fleet"] == fleet.id
    keys = json.loads(files["edgegossip/link.keys"])
    assert keys["device"] == d.id and all(str(d.id) in k.split(">") for k in keys["links"])
    assert (
        files["edgegossip/server.key_secret"].startswith(b"#")
        and b"secret-key" in files["edgegossip/server.key_secret"]
    )
    wheels = [n for n in files if n.startswith("edgegossip/wheels/edgegossip-")]
    assert len(wheels) == 1 and files[wheels[0]] == b"PK\x03\x04 wheel bytes"
    assert b"EG_NO_START" in files["edgegossip/install.sh"]
    # the agent waits for the clock itself: ordered after time-sync.target it would never start
    # on a LAN without a time server
    assert b"After=network-online.target\n" in files["edgegossip/edgegossip-agent.service"]
    assert b"time-sync.target\n" not in files["edgegossip/edgegossip-agent.service"]
    # the device's host key, made by flash and pinned before it ever boots (issue 21, item 2)
    public = files["edgegossip/ssh_host_ed25519_key.pub"].decode().split()
    assert files["edgegossip/ssh_host_ed25519_key"].startswith(b"-----BEGIN OPENSSH PRIVATE KEY")
    pinned = [
        ln.split()
        for ln in (fleet.secrets / "known_hosts").read_text().splitlines()
        if ln.split()[0] == d.address
    ]
    assert pinned == [[d.address, public[0], public[1]]]


def test_flash_trixie_image_with_cloud_init(fleet, tmp_path):
    write_wheelhouse(fleet.root / "wheelhouse", "aarch64", "3.13")  # Trixie's Python
    img = make_image(tmp_path / "trixie.img", TRIXIE)
    p = flash(fleet, "pi1", "--image", str(img), *wifi(tmp_path), "--json")
    assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)
    assert row["format"] == "cloud-init" and row["detected"] is True
    files = read_all(img)
    assert set(TRIXIE) <= set(files) and files["config.txt"] == b"arm_64bit=1\n"
    check_bundle(files, fleet, "pi1")
    cmd = files["cmdline.txt"].decode()
    assert cmd.count("\n") == 1 and cmd.startswith(CMDLINE.strip() + " ")
    assert cmd.strip().endswith(f"ds=nocloud;i={row['instance_id']}")
    assert f"instance-id: {row['instance_id']}" in files["meta-data"].decode()
    ud = tmp_path / "user-data"
    ud.write_bytes(files["user-data"])
    v = subprocess.run(
        ["cloud-init", "schema", "--config-file", str(ud)], capture_output=True, text=True
    )
    assert v.returncode == 0 and "Valid cloud-config" in v.stdout, v.stdout + v.stderr
    doc = json.loads(files["user-data"].decode().split("\n", 1)[1])
    user = doc["user"]  # singular, as Imager writes it: the OS's default user, its groups kept
    assert "groups" not in user and doc["manage_resolv_conf"] is False
    assert ["chmod", "0440", "/etc/sudoers.d/010_pi-nopasswd"] in doc["runcmd"]
    pub = (fleet.ssh_key_path().with_name("id_ed25519.pub")).read_text().strip()
    assert doc["hostname"] == "pi1" and user["name"] == "pi" and user["lock_passwd"] is True
    assert user["ssh_authorized_keys"] == [pub] and doc["ssh_pwauth"] is False
    assert any("rm -rf /boot/firmware/edgegossip" in " ".join(c) for c in doc["runcmd"])
    net = json.loads(files["network-config"])
    ap = net["network"]["wifis"]["wlan0"]
    psk = hashlib.pbkdf2_hmac("sha1", PASSPHRASE.encode(), b"farm", 4096, 32).hex()
    assert ap["access-points"]["farm"]["password"] == psk and ap["regulatory-domain"] == "GB"
    parsed = subprocess.run(
        [
            "/usr/bin/python3",
            "-c",
            "import json,sys; from cloudinit.net.network_state import parse_net_config_data as p;"
            "s = p(json.load(sys.stdin)['network']); print(sorted(i['name'] for i in s.iter_interfaces()))",
        ],
        input=files["network-config"].decode(),
        capture_output=True,
        text=True,
    )
    # Debian's cloud-init 22.4 parses netplan v2 (a malformed file raises) but keeps no Wi-Fi state
    assert parsed.returncode == 0 and "eth0" in parsed.stdout, parsed.stderr
    assert PASSPHRASE.encode() not in img.read_bytes()  # never in clear, anywhere on the card


def test_flash_bookworm_image_with_firstrun(fleet, tmp_path):
    img = make_image(tmp_path / "bookworm.img", BOOKWORM)
    for _ in range(2):  # flashing again replaces, never piles up
        p = flash(fleet, "pi2", "--image", str(img), *wifi(tmp_path), "--json")
        assert p.returncode == 0, p.stderr
    row = json.loads(p.stdout)
    assert row["format"] == "firstrun"
    files = read_all(img)
    check_bundle(files, fleet, "pi2")
    cmd = files["cmdline.txt"].decode()
    assert cmd.count("systemd.run=/boot/firmware/firstrun.sh") == 1 and cmd.count("\n") == 1
    assert "systemd.run_success_action=reboot systemd.unit=kernel-command-line.target" in cmd
    script = tmp_path / "firstrun.sh"
    script.write_bytes(files["firstrun.sh"])
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    if shutil.which("shellcheck"):
        sc = subprocess.run(
            ["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True
        )
        assert sc.returncode == 0, sc.stdout
    text = files["firstrun.sh"].decode()
    psk = hashlib.pbkdf2_hmac("sha1", PASSPHRASE.encode(), b"farm", 4096, 32).hex()
    assert f"psk={psk}" in text and PASSPHRASE not in text
    assert "shred -u -n 1 -z /boot/firmware/firstrun.sh" in text
    assert "rm -rf /boot/firmware/edgegossip" in text
    assert "systemd-time-wait-sync" not in text and "echo pi2 > /etc/hostname" in text
    assert PASSPHRASE.encode() not in img.read_bytes()


def test_flash_boot_folder_and_format_override(fleet, tmp_path):
    boot = tmp_path / "bootfs"
    boot.mkdir()
    for name, text in BOOKWORM.items():
        (boot / name).write_text(text)
    p = flash(fleet, "pi0", "--boot", str(boot), "--format", "cloud-init", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["detected"] is False
    assert (boot / "user-data").is_file() and "ds=nocloud;i=" in (boot / "cmdline.txt").read_text()
    assert not (boot / "firstrun.sh").exists() and (boot / "edgegossip" / "link.keys").is_file()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--image", "MISSING_CMDLINE"], "no cmdline.txt"),
        (["--image", "TRUNCATED"], "runs past the end"),
        (
            ["--image", "GOOD", "--wifi-ssid", "farm"],
            "Wi-Fi needs --wifi-ssid, --wifi-country and --wifi-psk-file",
        ),
        (["--image", "GOOD", "--boot", "."], "exactly one of"),
    ],
)
def test_flash_bad_input_is_one_line(fleet, tmp_path, args, message):
    images = {
        "MISSING_CMDLINE": make_image(tmp_path / "a.img", {"config.txt": "x\n"}),
        "GOOD": make_image(tmp_path / "g.img", BOOKWORM),
    }
    t = make_image(tmp_path / "t.img", BOOKWORM)
    with open(t, "r+b") as f:
        f.truncate(8192 * 512 + 1000)
    images["TRUNCATED"] = t
    p = flash(fleet, "pi0", *[str(images.get(a, a)) for a in args])
    assert p.returncode == 2 and message in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_device_refusals(fleet, tmp_path):
    # a fake /sys: a removable disk whose partition is mounted
    sysfs = tmp_path / "sys"
    (sysfs / "block" / "sdz" / "sdz1").mkdir(parents=True)
    (sysfs / "block" / "sdz" / "removable").write_text("1\n")
    with pytest.raises(disk.DiskError, match="part of the running system"):
        disk.check("/dev/sdz", sysfs, "/dev/sdz1 / ext4 rw 0 0\n")
    with pytest.raises(disk.DiskError, match="give --boot /media/u/bootfs"):
        disk.check("/dev/sdz", sysfs, "/dev/sdz1 /media/u/bootfs vfat rw 0 0\n")
    disk.check("/dev/sdz", sysfs, "/dev/sda1 / ext4 rw 0 0\n")
    (sysfs / "block" / "sdz" / "removable").write_text("0\n")
    with pytest.raises(disk.DiskError, match="not a removable disk"):
        disk.check("/dev/sdz", sysfs, "")
    with pytest.raises(disk.DiskError, match="not a whole disk"):
        disk.check("/dev/sdz1", sysfs, "")


def test_device_refuses_a_fixed_disk_for_real(fleet, tmp_path, root_only):
    img = make_image(tmp_path / "loop.img", BOOKWORM)
    loop = subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True, text=True)
    if loop.returncode != 0:
        pytest.fail(f"losetup: {loop.stderr}")
    try:
        p = flash(fleet, "pi0", "--device", loop.stdout.strip())
    finally:
        subprocess.run(["losetup", "-d", loop.stdout.strip()])
    assert p.returncode == 2 and "not a removable disk" in p.stderr


def test_a_card_flashed_for_another_device_is_refused(fleet, tmp_path):
    """Issue 21, item 8: flashing B over a card flashed for A left A's secrets on the card."""
    boot = tmp_path / "bootfs"
    boot.mkdir()
    for name, text in BOOKWORM.items():
        (boot / name).write_text(text)
    assert flash(fleet, "pi0", "--boot", str(boot)).returncode == 0
    assert flash(fleet, "pi0", "--boot", str(boot)).returncode == 0  # the same device again
    p = flash(fleet, "pi1", "--boot", str(boot))
    assert p.returncode == 2 and "--over-another-device" in p.stderr
    assert p.stderr.strip().count("\n") == 0
    assert flash(fleet, "pi1", "--boot", str(boot), "--over-another-device").returncode == 0


def test_the_card_says_its_system():
    from edgegossip.flash import card

    def read(files: dict[str, str], root=None) -> dict:
        return card.read(list(files), {n: files.get(n, "") for n in card.TEXT_FILES}, root)

    issue = "Raspberry Pi reference 2025-10-01\nGenerated using pi-gen, x, abc, stage2\n"
    trixie = read({**TRIXIE, "issue.txt": issue})
    assert {k: trixie[k] for k in ("os", "date", "machine", "python", "glibc")} == {
        "os": "Raspberry Pi OS trixie",
        "date": "2025-10-01",
        "machine": "aarch64",
        "python": "3.13",
        "glibc": "2.41",
    }
    assert trixie["raspberry_pi"] and trixie["markers"][:3] == [
        "issue.txt",
        "kernel8.img",
        "kernel_2712.img",
    ]
    assert read(BOOKWORM)["python"] == "3.11"
    armhf = read(
        {n: "" for n in ["kernel.img", "kernel7l.img", "kernel8.img"]}
        | {"issue.txt": "Raspberry Pi reference 2023-10-10"}
    )
    assert (armhf["machine"], armhf["python"]) == ("armv7l", "3.11")
    old = read({"issue.txt": "Raspberry Pi reference 2023-05-03"})
    assert (old["os"], old["machine"], old["python"]) == ("Raspberry Pi OS bullseye", None, "3.9")
    bare = read({"cmdline.txt": "root=/dev/vda2 rootwait\n"})
    assert bare["raspberry_pi"] is False and bare["markers"] == []
    assert {bare[k] for k in ("os", "date", "machine", "python", "glibc")} == {None}
    # the root partition's word outranks the boot partition's
    root = {"os": "Debian GNU/Linux 12 (bookworm)", "codename": "bookworm", "machine": "aarch64"}
    both = read(TRIXIE, root)
    assert (both["python"], both["os"], both["markers"][-1]) == (
        "3.11",
        "Debian GNU/Linux 12 (bookworm)",
        "root os-release",
    )


@pytest.mark.parametrize(
    "system, machine, python, says",
    [
        (TRIXIE, "aarch64", "3.11", "is Raspberry Pi OS trixie (aarch64 Python 3.13 glibc 2.41)"),
        (
            BOOKWORM,
            "x86_64",
            "3.11",
            "is Raspberry Pi OS bookworm (aarch64 Python 3.11 glibc 2.36)",
        ),
    ],
)
def test_a_wheelhouse_for_another_system_is_refused_and_nothing_written(
    fleet, tmp_path, system, machine, python, says
):
    write_wheelhouse(fleet.root / "wheelhouse", machine, python)
    img = make_image(tmp_path / "card.img", system)
    before = img.read_bytes()
    p = flash(fleet, "pi0", "--image", str(img))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert says in p.stderr and f"the wheelhouse is for {machine} Python {python}" in p.stderr
    # the command that builds the right one, for the card's release
    assert f"fleet wheelhouse --for {says.split()[4]}-arm64" in p.stderr
    assert img.read_bytes() == before
    known = fleet.secrets / "known_hosts"  # no host key pinned for a card not written
    assert not known.exists() or "192.0.2.1" not in known.read_text()


def test_wheels_fit_a_system_of_their_machine_and_python_with_as_new_a_glibc():
    from edgegossip.fleet.bundle import misfits

    wheels = {"machine": "aarch64", "python": "3.11", "glibc": "2.36"}
    assert misfits({**wheels, "glibc": "2.41"}, wheels) == []  # newer glibc runs older wheels
    assert misfits({**wheels, "glibc": "2.31"}, wheels) == ["glibc"]
    assert misfits({"machine": "x86_64", "python": "3.13", "glibc": "2.41"}, wheels) == [
        "machine",
        "python",
    ]
    assert misfits({"machine": "aarch64", "python": None, "glibc": None}, wheels) == []
