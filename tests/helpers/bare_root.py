"""A bare Debian root (debootstrap minbase, nothing of ours installed) for the from-scratch test
of the install step, built once and cached; each test runs on an overlay so the cache stays bare."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

from edgegossip import paths
from edgegossip.lab import root as lab_root

SUITE = "bookworm"


def ensure() -> Path:
    root = paths.cache_dir() / "test-roots" / f"bare-{SUITE}"
    if (root / ".ready").is_file():
        return root
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["debootstrap", "--variant=minbase", SUITE, str(partial), lab_root.mirror()],
        check=True,
        capture_output=True,
        timeout=900,
    )
    (partial / ".ready").touch()
    partial.rename(root)
    return root


@contextlib.contextmanager
def overlay(base: Path, work: Path):
    """base, writable through an overlay at work/root, with /proc, /dev and DNS for apt."""
    top = work / "root"
    for d in ("upper", "work", "root"):
        (work / d).mkdir(parents=True)
    mounts: list[Path] = []
    try:
        subprocess.run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={base},upperdir={work / 'upper'},workdir={work / 'work'}",
                str(top),
            ],
            check=True,
            capture_output=True,
        )
        mounts.append(top)
        subprocess.run(["mount", "-t", "proc", "proc", str(top / "proc")], check=True)
        mounts.append(top / "proc")
        subprocess.run(["mount", "--rbind", "/dev", str(top / "dev")], check=True)
        subprocess.run(["mount", "--make-rslave", str(top / "dev")], check=True)
        mounts.append(top / "dev")
        shutil.copyfile("/etc/resolv.conf", top / "etc/resolv.conf")
        # a throwaway root: dpkg need not sync every file it unpacks to the disk
        (top / "etc/dpkg/dpkg.cfg.d/throwaway").write_text("force-unsafe-io\n")
        rc = top / "usr/sbin/policy-rc.d"  # no service starts inside a chroot
        rc.write_text("#!/bin/sh\nexit 101\n")
        rc.chmod(0o755)
        yield top
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-R", "-l", str(m)], capture_output=True)
