"""The two first-boot formats of Raspberry Pi OS, and what each is given.

- cloud-init NoCloud (Trixie images ship `user-data`, `meta-data` and `network-config` on the
  boot partition): user-data sets hostname, the user with the fleet's SSH key and no password,
  SSH without passwords, and runs the agent's install from the bundle; meta-data carries a fresh
  instance-id per flash (so a re-flashed card is provisioned again); network-config is netplan v2
  with the Wi-Fi's regulatory-domain and the hashed PSK; cmdline.txt gets ` ds=nocloud;i=ID`.
- firstrun.sh (Bookworm, as Raspberry Pi Imager writes it): one script run once by systemd from
  the kernel command line (`systemd.run=... systemd.run_success_action=reboot
  systemd.unit=kernel-command-line.target`), which does the same and removes itself.

Both install from `edgegossip/` on the boot partition (wheels and this device's files, deploy's
bundle), start the agent (which waits a bounded time for a synchronised clock itself: Pis have
no RTC, and systemd-time-wait-sync would hold every later boot of a fleet without a time server
short of multi-user.target), and delete the bundle, with its secrets, from the boot partition."""

from __future__ import annotations

import json
import shlex

from edgegossip.fleet.agentconf import FIRSTBOOT_TAG

FORMATS = ("cloud-init", "firstrun")
BUNDLE = "edgegossip"  # folder on the boot partition
FIRMWARE = "/boot/firmware"  # where Raspberry Pi OS mounts the boot partition
HOST_KEY = "ssh_host_ed25519_key"  # in the bundle: the host key `fleet flash` made and pinned
NETWORK_CONFIG = f"{FIRMWARE}/network-config"
RUN_ARGS = (
    "systemd.run=/boot/firmware/firstrun.sh systemd.run_success_action=reboot "
    "systemd.unit=kernel-command-line.target"
)


def detect(files: list[str], issue: str) -> str:
    """cloud-init when the image carries cloud-init's seed files or says it is Trixie."""
    if {"user-data", "meta-data", "network-config"} & set(files) or "trixie" in issue.lower():
        return "cloud-init"
    return "firstrun"


def cmdline(old: str, fmt: str, instance: str) -> str:
    """The kernel command line (one line) with our first-boot arguments, replacing earlier ones."""
    words = [w for w in old.split() if not w.startswith(("systemd.run", "systemd.unit=", "ds="))]
    words += [f"ds=nocloud;i={instance}"] if fmt == "cloud-init" else RUN_ARGS.split()
    return " ".join(words) + "\n"


def install_commands(release: str) -> list[str]:
    """Shell lines, run as root on first boot: install the bundle, remove secrets, start.

    The bundle's secrets are copied into a folder only root can enter, with umask 077, so no
    byte of them is readable by another user even for a moment (FAT shows every file as 0755); if
    the install fails, the copy and the bundle on the boot partition are removed all the same,
    and the cause goes to the journal (`journalctl -t edgegossip-firstboot`)."""
    b = f"{FIRMWARE}/{BUNDLE}"
    inc = "/opt/edgegossip/incoming"
    return [
        "install -d -m 0755 /opt/edgegossip",
        f"rm -rf {inc} && install -d -m 0700 {inc} && (umask 077 && cp -r {b}/. {inc}/)",
        f"if [ -f {inc}/{HOST_KEY} ]; then "
        f"install -m 0600 {inc}/{HOST_KEY} /etc/ssh/{HOST_KEY} && "
        f"install -m 0644 {inc}/{HOST_KEY}.pub /etc/ssh/{HOST_KEY}.pub && "
        f"rm -f {inc}/{HOST_KEY} {inc}/{HOST_KEY}.pub && "
        "{ systemctl try-reload-or-restart ssh 2>/dev/null || true; }; fi",
        f"out=$(EG_NO_START=1 bash {inc}/install.sh {inc} {shlex.quote(release)} '' 2>&1) || "
        f'{{ logger -t {FIRSTBOOT_TAG} "install failed: $(printf %s "$out" | tail -n 1)"; '
        f"rm -rf {inc}; find {b} -type f -exec shred -u -n 1 -z {{}} + ; rm -rf {b}; false; }}",
        # overwrite the bundle's bytes, not only its directory entries: FAT writes in place, and
        # a deleted file's clusters would still hold the keys for whoever reads the card
        f"find {b} -type f -exec shred -u -n 1 -z {{}} + ; rm -rf {b}",
        "systemctl start --no-block edgegossip-agent.service",
    ]


def user_data(hostname: str, user: str, ssh_key: str, release: str) -> str:
    """As Raspberry Pi Imager writes it for the same image (src/customization_generator.cpp,
    read 2026-12-01): a singular `user:`, which renames the OS's default user and keeps its
    groups (sudo, adm, gpio, video...; a `users:` list makes a user of no group, Imager issue
    #1601), passwordless sudo written as a sudoers file too (cc_raspberry_pi does not always
    apply `sudo:`), ssh enabled in runcmd (the image ships it off), and DNS left to
    NetworkManager (`manage_resolv_conf: false`)."""
    sudoers = f"/etc/sudoers.d/010_{user}-nopasswd"
    doc = {
        "manage_resolv_conf": False,
        "hostname": hostname,
        "manage_etc_hosts": True,
        "ssh_pwauth": False,
        "user": {
            "name": user,
            "shell": "/bin/bash",
            "lock_passwd": True,
            "sudo": "ALL=(ALL) NOPASSWD:ALL",
            "ssh_authorized_keys": [ssh_key.strip()],
        },
        "runcmd": [
            ["systemctl", "enable", "--now", "ssh"],
            ["sh", "-c", f"echo {shlex.quote(f'{user} ALL=(ALL) NOPASSWD:ALL')} > {sudoers}"],
            ["chmod", "0440", sudoers],
        ]
        + [["bash", "-c", c] for c in install_commands(release)]
        # the hashed PSK joins the Wi-Fi as well as the passphrase: once cloud-init has rendered
        # it into /etc (root's), the card keeps no copy. NoCloud applies network config to a new
        # instance only, so later boots of this one do not read it again.
        + [["bash", "-c", f"[ ! -f {NETWORK_CONFIG} ] || shred -u -n 1 -z {NETWORK_CONFIG}"]],
    }
    return "#cloud-config\n" + json.dumps(doc, indent=1) + "\n"  # JSON is YAML


def meta_data(instance: str, hostname: str) -> str:
    return f"instance-id: {instance}\nlocal-hostname: {hostname}\n"


def network_config(ssid: str | None, psk_hex: str | None, country: str | None) -> str:
    doc: dict = {
        # as Imager writes it: IPv6 on the wire too
        "network": {
            "version": 2,
            "ethernets": {"eth0": {"dhcp4": True, "dhcp6": True, "optional": True}},
        }
    }
    if ssid:
        doc["network"]["wifis"] = {
            "wlan0": {
                "dhcp4": True,
                "optional": True,
                "regulatory-domain": country,
                "access-points": {ssid: {"password": psk_hex}},
            }
        }
    return json.dumps(doc, indent=1) + "\n"


def _wifi_lines(ssid: str, psk_hex: str | None, country: str | None) -> list[str]:
    """A NetworkManager connection for the fleet's Wi-Fi, readable by root only."""
    q = shlex.quote
    nm = "/etc/NetworkManager/system-connections/edgegossip-wifi.nmconnection"
    return [
        f"(umask 077; cat > {nm}) <<'EOF'",
        "[connection]",
        "id=edgegossip-wifi",
        "type=wifi",
        "autoconnect=true",
        "",
        "[wifi]",
        "mode=infrastructure",
        f"ssid={ssid}",
        "",
        "[wifi-security]",
        "key-mgmt=wpa-psk",
        f"psk={psk_hex}",
        "",
        "[ipv4]",
        "method=auto",
        "",
        "[ipv6]",
        "method=auto",
        "EOF",
        f"chmod 0600 {nm}",
        f"iw reg set {q(country or '')} 2>/dev/null || true",
        f"command -v raspi-config >/dev/null && raspi-config nonint do_wifi_country {q(country or '')}",
        "rfkill unblock wifi 2>/dev/null || true",
    ]


def firstrun(
    hostname: str,
    user: str,
    ssh_key: str,
    release: str,
    ssid: str | None,
    psk_hex: str | None,
    country: str | None,
) -> str:
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        "# edgegossip first boot (Raspberry Pi OS Bookworm): run once by systemd from cmdline.txt",
        "set -u",
        "old=$(tr -d ' \\t\\n\\r' < /etc/hostname)",
        f"echo {q(hostname)} > /etc/hostname",
        f'sed -i "s/127.0.1.1.*$old/127.0.1.1\\t{hostname}/" /etc/hosts',
        f"if ! id -u {q(user)} >/dev/null 2>&1; then",
        "  first=$(getent passwd 1000 | cut -d: -f1)",
        '  if [ -n "$first" ]; then',
        f'    usermod -l {q(user)} "$first" && usermod -m -d /home/{user} {q(user)} '
        f'&& groupmod -n {q(user)} "$first"',
        "  else",
        f"    useradd -m -s /bin/bash -G sudo {q(user)}",
        "  fi",
        "fi",
        f"passwd -l {q(user)}",
        f"install -d -m 0700 -o {q(user)} -g {q(user)} /home/{user}/.ssh",
        f"echo {q(ssh_key.strip())} > /home/{user}/.ssh/authorized_keys",
        f"chown {q(user)}:{q(user)} /home/{user}/.ssh/authorized_keys",
        f"chmod 0600 /home/{user}/.ssh/authorized_keys",
        f"echo {q(user + ' ALL=(ALL) NOPASSWD: ALL')} > /etc/sudoers.d/010_edgegossip-nopasswd",
        "chmod 0440 /etc/sudoers.d/010_edgegossip-nopasswd",
        "sed -i 's/^#\\?PasswordAuthentication.*/PasswordAuthentication no/' /etc/ssh/sshd_config",
        "systemctl enable ssh",
    ]
    if ssid:
        lines += _wifi_lines(ssid, psk_hex, country)
    lines += install_commands(release)[:-1]  # the reboot starts the agent; no start now
    lines += [
        f"sed -i 's| systemd.run.*||g' {FIRMWARE}/cmdline.txt",
        # the script holds the hashed PSK: overwritten, not only unlinked. One group on the
        # last line, which bash reads whole before it runs it, so nothing is read back after
        f"{{ shred -u -n 1 -z {FIRMWARE}/firstrun.sh; exit 0; }}",
    ]
    return "\n".join(lines) + "\n"
