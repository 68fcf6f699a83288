"""The Wi-Fi pre-shared key as Raspberry Pi Imager stores it: the 256-bit WPA PSK,
PBKDF2-HMAC-SHA1(passphrase, SSID, 4096 rounds), in hex. wpa_supplicant, NetworkManager and
netplan take the 64 hex digits in place of the passphrase, which is never written anywhere."""

from __future__ import annotations

import hashlib

COUNTRIES = None  # two-letter ISO 3166 codes: checked for shape, the regulatory database decides


def psk(ssid: str, passphrase: str) -> str:
    if not 8 <= len(passphrase) <= 63:
        raise ValueError("a WPA passphrase has 8 to 63 characters")
    if not 1 <= len(ssid.encode()) <= 32:
        raise ValueError("an SSID has 1 to 32 bytes")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in ssid):
        # it lands in a shell heredoc and a NetworkManager keyfile as root on first boot
        raise ValueError(f"--wifi-ssid {ssid!r}: control characters (a newline, a tab) are refused")
    return hashlib.pbkdf2_hmac("sha1", passphrase.encode(), ssid.encode(), 4096, 32).hex()


def check_country(code: str) -> str:
    if len(code) != 2 or not code.isalpha():
        raise ValueError(f"--wifi-country {code!r}: a two-letter country code, e.g. GB or DE")
    return code.upper()
