"""A lab device booted from a card (lab/card.py), without booting one: the supervising shell
reboots on nspawn's reboot status with cmdline.txt read afresh each time, and the card's files
read as Raspberry Pi OS's vfat mount shows them. The booted path itself is
scripts/check-first-boot.sh's."""

import os
import stat
import subprocess

import pytest

from edgegossip.lab import card
from edgegossip.lab import root as lab_root


def test_reboots_with_the_command_line_as_firstrun_left_it(tmp_path):
    """A stand-in for systemd-nspawn records the kernel words each boot gets; the first boot
    takes systemd.run out of cmdline.txt (as firstrun.sh does) and reboots (133), the second
    powers off (0). The second boot must not get the first's words, and no word is globbed."""
    boot = tmp_path / "card"
    boot.mkdir()
    (boot / "cmdline.txt").write_text("root=PARTUUID=1 quiet * systemd.run=/boot/firmware/x.sh\n")
    (tmp_path / "a-file-a-glob-would-find").touch()
    fake = tmp_path / "systemd-nspawn"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/boots\n'
        f"n=$(wc -l < {tmp_path}/boots)\n"
        f'[ "$n" = 1 ] && sed -i "s| systemd.run.*||" {boot}/cmdline.txt && exit 133\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    argv = card.argv(tmp_path / "root", "d", "ns", boot, None, lab_root.DEFAULT)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    p = subprocess.run(argv, env=env, cwd=tmp_path, timeout=30)
    assert p.returncode == 0
    first, second = (tmp_path / "boots").read_text().splitlines()
    assert first.endswith("root=PARTUUID=1 quiet * systemd.run=/boot/firmware/x.sh")
    assert second.endswith("root=PARTUUID=1 quiet *") and "systemd.run" not in second
    assert "--bind=" + str(boot) + ":/boot/firmware" in first


def test_a_failed_boot_ends_the_supervisor_with_its_status(tmp_path):
    boot = tmp_path / "card"
    boot.mkdir()
    (boot / "cmdline.txt").write_text("quiet\n")
    (tmp_path / "systemd-nspawn").write_text("#!/bin/sh\nexit 203\n")
    (tmp_path / "systemd-nspawn").chmod(0o755)
    argv = card.argv(tmp_path / "root", "d", "ns", boot, None, lab_root.DEFAULT)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    assert subprocess.run(argv, env=env, timeout=30).returncode == 203


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to root needs root")
def test_the_card_reads_as_vfat_shows_it(tmp_path):
    """systemd.run= executes firstrun.sh as it is: on a Pi every file of the boot partition is
    0755 and root's, whatever `fleet flash` wrote."""
    boot = tmp_path / "card"
    (boot / "edgegossip").mkdir(parents=True)
    (boot / "firstrun.sh").write_text("#!/bin/bash\n")
    (boot / "firstrun.sh").chmod(0o600)
    (boot / "edgegossip/agent.toml").write_text("")
    os.chown(boot / "edgegossip/agent.toml", 1000, 1000)
    card.as_fat(boot)
    for p in (boot, boot / "edgegossip", boot / "firstrun.sh", boot / "edgegossip/agent.toml"):
        st = p.stat()
        assert stat.S_IMODE(st.st_mode) == 0o755 and (st.st_uid, st.st_gid) == (0, 0), p
