"""Raspberry Pi boards as emulated devices: each profile's CPU share of this machine and its
memory limit (cgroups.py enforces both), so that one fleet mixes Pi Zero 2 Ws with Pi 4s and
Pi 5s: `emulate --devices 8:pi-zero-2w,4:pi4,4:pi5`.

A profile's speed is its board's HPL (High-Performance Linpack: dense double-precision matrix
products, what a training step's convolutions and linear layers are made of) over a Pi 5's in
the same published harness, so each ratio compares like with like:
- Pi 4 against Pi 5: Jeff Geerling's top500-benchmark (github.com/geerlingguy/top500-benchmark,
  its README's table and issues #13 and #18: 11.889 and 35.169 Gflops, both 8 GB boards).
- Pi Zero 2 W against Pi 5: Vince Weaver's GFLOPS/W listing (University of Maine,
  web.eece.maine.edu/~vweaver/group/green_machines.html: 5.1 and 31.4 Gflops, as quoted by
  PumaGuard's docs/source/Performance.rst; the page itself was not reachable from here).
  Geerling's own Zero 2 W run (0.370 Gflops, issue #26) sized its matrix to 435 MB of the
  board's 512 and is not a compute figure: a small model's step does not page.
A share is absolute: a Pi 5 gets `scale` cores of this machine (--device-scale) and the others
their ratio of that, so adding a device adds compute until the shares fill this machine's
cores; a fleet beyond that is refused, for its ratios would no longer hold."""

from __future__ import annotations

import os
from dataclasses import dataclass

from edgegossip.run import MIN_SHARE, Device

DEFAULT_SCALE = 0.25  # a Pi 5's share of one of this machine's cores: 8 of them fill 2 cores


@dataclass(frozen=True)
class Profile:
    board: str
    gflops: float  # HPL, the board's four cores
    pi5_gflops: float  # a Pi 5's in the same harness: the ratio's other side
    memory_mb: int  # the board's RAM: its agent's limit (its OS takes part of it on the board)

    @property
    def speed(self) -> float:
        """The board's speed as a fraction of a Pi 5's."""
        return self.gflops / self.pi5_gflops


PROFILES = {
    "pi-zero-2w": Profile("Raspberry Pi Zero 2 W", 5.1, 31.4, 512),
    "pi4": Profile("Raspberry Pi 4 Model B", 11.889, 35.169, 8192),
    "pi5": Profile("Raspberry Pi 5", 35.169, 35.169, 8192),
}


def table() -> str:
    """The profiles as docs/usage.md shows them (a test holds the page to this)."""
    rows = ["| profile | board | HPL, Gflops | of a Pi 5 | memory |", "|---|---|---|---|---|"]
    for name, p in PROFILES.items():
        hpl = f"{p.gflops:g}" + ("" if p.speed == 1 else f" (Pi 5: {p.pi5_gflops:g})")
        memory = f"{p.memory_mb // 1024} GB" if p.memory_mb >= 1024 else f"{p.memory_mb} MB"
        rows.append(f"| `{name}` | {p.board} | {hpl} | {round(p.speed, 3):g} | {memory} |")
    return "\n".join(rows) + "\n"


def devices(spec: str) -> tuple[str, ...]:
    """--devices COUNT:PROFILE,... as each node's profile, in node order."""
    out: list[str] = []
    for part in spec.split(","):
        count, _, name = part.strip().partition(":")
        if name not in PROFILES or not count.isdigit() or int(count) < 1:
            raise ValueError(
                f"--devices {spec}: want COUNT:PROFILE,... with PROFILE one of "
                f"{', '.join(PROFILES)} (e.g. 8:pi-zero-2w,4:pi4,4:pi5)"
            )
        out += [name] * int(count)
    return tuple(out)


def limits(names: tuple[str, ...], scale: float, cores: int | None = None) -> tuple[Device, ...]:
    """Each node's board with its CPU share (in cores) and memory limit; refused where the
    shares add up to more than this machine's cores."""
    cores = cores or os.cpu_count() or 1
    shares = [round(scale * PROFILES[n].speed, 4) for n in names]
    total = sum(shares)
    if min(shares) < MIN_SHARE:
        raise ValueError(
            f"--device-scale {scale}: its slowest device would get less than the kernel's "
            f"least quota ({MIN_SHARE} of a core)"
        )
    if total > cores:
        raise ValueError(
            f"--devices: their shares add up to {total:.2f} cores at --device-scale {scale} "
            f"(a Pi 5's), more than this machine's {cores}: a smaller scale keeps the ratios"
        )
    return tuple(Device(n, s, PROFILES[n].memory_mb) for n, s in zip(names, shares))
