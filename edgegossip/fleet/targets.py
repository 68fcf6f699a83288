"""The device platforms: the Raspberry Pi OS releases edgegossip knows, and the targets a
wheelhouse can be built for on the operator's own machine (`fleet wheelhouse --for TARGET`).

A Raspberry Pi OS release is a Debian release rebuilt for the Pi, with that release's Python and
glibc (Trixie: Debian 13, Python 3.13, glibc 2.41; Bookworm: Debian 12, Python 3.11, glibc
2.36). Its images carry their build date in the boot partition's issue.txt (flash/card.py);
the first date of each release is when Raspberry Pi published it. A target is one release on
one architecture: 64-bit Raspberry Pi OS is Debian's arm64 (machine aarch64), which every Pi
since the Pi 3 and the Pi Zero 2 W runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    name: str  # the Debian release it is built on
    first_image: str  # date of its first Raspberry Pi OS image, YYYY-MM-DD
    python: str
    glibc: str


# newest first: an image belongs to the first release whose first image is not after it
RELEASES = (
    Release("trixie", "2025-10-01", "3.13", "2.41"),
    Release("bookworm", "2023-10-10", "3.11", "2.36"),
    Release("bullseye", "0000-00-00", "3.9", "2.31"),
)
RELEASES_BY_NAME = {r.name: r for r in RELEASES}


def release_of(image_date: str) -> Release:
    return next(r for r in RELEASES if image_date >= r.first_image)


@dataclass(frozen=True)
class Target:
    release: Release
    debian_arch: str  # what debootstrap calls it
    machine: str  # what platform.machine() says on the device

    @property
    def name(self) -> str:
        return f"{self.release.name}-{self.debian_arch}"

    def platform(self) -> dict:
        """As bundle.this_platform() says it on such a device."""
        return {"machine": self.machine, "python": self.release.python, "glibc": self.release.glibc}

    def abi(self) -> str:
        return "cp" + self.release.python.replace(".", "")

    def pip_platforms(self) -> list[str]:
        """The wheel platform tags such a device installs: manylinux up to its glibc."""
        top = int(self.release.glibc.split(".")[1])
        tags = [f"manylinux_2_{minor}_{self.machine}" for minor in range(17, top + 1)]
        return [*tags, f"manylinux2014_{self.machine}"]

    def describe(self) -> str:
        r = self.release
        return (
            f"64-bit Raspberry Pi OS {r.name.title()} "
            f"({self.machine}, Python {r.python}, glibc {r.glibc})"
        )


# the core qemu-user emulates for a machine's programs here: the Pi 4's (BCM2711, Cortex-A72;
# qemu's model has the crypto extension the BCM2711 lacks). Never qemu's default "max": with
# its SVE and SME, numpy 2.5's float32 matmul (OpenBLAS) came out wrong under qemu 10.0
# (errors of 212 on a 32x784 by 784x10 product) and training went to NaN.
QEMU_CPU = {"aarch64": "cortex-a72"}

TARGETS = {t.name: t for t in (Target(r, "arm64", "aarch64") for r in RELEASES[:2])}


def build_hint(system: dict) -> str:
    """The command that builds a wheelhouse for that system (as bundle.this_platform() says
    it), for the error that refuses another one."""
    for name, t in TARGETS.items():
        if t.machine == system.get("machine") and t.release.python == system.get("python"):
            return f"`edgegossip fleet wheelhouse --for {name} --out DIR`"
    return "`edgegossip fleet wheelhouse --out DIR` on such a device"
