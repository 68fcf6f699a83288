"""The edgegossip wheel for another device platform, compiled on the operator's machine.

The wheel holds compiled extensions (the kernels, the wire path, the UDP batches), so it must be
built against the device's own Python, glibc and OpenSSL. It is: in a Debian root of the
target's release and architecture (debootstrap, from the Debian mirror this machine's apt
already uses), entered with chroot, whose aarch64 programs run under qemu-user through
binfmt_misc. The root, with a venv holding pyproject's build requirements from the package
index, is built once per target and kept; the wheel is kept per source digest, so building
again from an unchanged tree takes seconds. Needs root (debootstrap, chroot, mounts) and the
Debian packages qemu-user-static and binfmt-support.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tomllib
from pathlib import Path

from edgegossip import paths, tools
from edgegossip.errors import EdgegossipError
from edgegossip.fleet.targets import QEMU_CPU, Target

# what compiling the wheel needs in the root (libssl-dev: the wire path links libcrypto)
PACKAGES = ("python3", "python3-venv", "python3-dev", "gcc", "libc6-dev", "libssl-dev")
ROOT_LAYOUT = 1  # bump when ensure_root() changes: a kept root is then built afresh
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
# what the wheel is built from; the rest of a checkout (venvs, caches, tests) stays out
SOURCES = ("edgegossip", "native", "devices", "pyproject.toml", "setup.py", "MANIFEST.in")
SKIP = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.egg-info", "build")


class CrossBuildError(EdgegossipError, RuntimeError):
    pass


def cache() -> Path:
    return paths.cache_dir() / "targets"


def root_path(target: Target) -> Path:
    stamp = hashlib.sha256(
        " ".join((target.name, *PACKAGES, *_build_requires(), str(ROOT_LAYOUT))).encode()
    ).hexdigest()[:12]
    return cache() / f"root-{target.name}-{stamp}"


def wheel(target: Target, digest: str, progress=print) -> Path:
    """The edgegossip wheel for target from the source tree whose digest this is."""
    out = cache() / f"wheel-{target.name}-{digest}"
    found = sorted(out.glob("edgegossip-*.whl"))
    if found:
        return found[-1]
    src = paths.source_tree()
    if src is None:
        raise CrossBuildError(
            "fleet wheelhouse --for builds from a source checkout: run it from a clone of "
            "edgegossip (an installed package has no sources to compile)"
        )
    root = ensure_root(target, progress)
    work = root / "opt" / "src"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in SOURCES:
        if (src / name).is_dir():
            shutil.copytree(src / name, work / name, ignore=SKIP)
        elif (src / name).is_file():
            shutil.copy2(src / name, work / name)
    (work / "README.md").write_text("edgegossip\n")  # pyproject's readme; not in the wheel's code
    progress(f"compiling edgegossip for {target.name} under emulation")
    dist = root / "opt" / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _in_root(
        root,
        target,
        "/opt/build/bin/pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        "/opt/dist",
        "/opt/src",
    )
    built = sorted(dist.glob("edgegossip-*.whl"))
    if len(built) != 1 or f"-{target.abi()}-" not in built[0].name:
        raise CrossBuildError(f"the build for {target.name} gave {[b.name for b in built]}")
    out.mkdir(parents=True, exist_ok=True)
    shutil.move(str(built[0]), out / built[0].name)
    shutil.rmtree(work, ignore_errors=True)
    return out / built[0].name


def ensure_root(target: Target, progress=print) -> Path:
    """The kept build root for target, made first when missing (a half-made one is started
    over)."""
    root = root_path(target)
    if (root / ".edgegossip-ready").is_file():
        return root
    tools.require(
        "debootstrap",
        "systemd-nspawn",
        "qemu-aarch64-static",
        "update-binfmts",
        why=f"the {target.name} build root",
    )
    tools.enable_binfmt(target.machine)
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    progress(f"building the {target.name} root in {root} (once; minutes under emulation)")
    _run(
        [
            "debootstrap",
            f"--arch={target.debian_arch}",
            "--variant=minbase",
            f"--include={','.join((*PACKAGES, 'ca-certificates'))}",
            target.release.name,
            str(partial),
            tools.debian_mirror(),
        ],
        "debootstrap",
    )
    _in_root(partial, target, "python3", "-m", "venv", "/opt/build")
    _in_root(partial, target, "/opt/build/bin/pip", "install", "--quiet", *_build_requires())
    (partial / ".edgegossip-ready").touch()
    partial.rename(root)
    return root


def _build_requires() -> list[str]:
    src = paths.source_tree()
    if src is None:
        return []
    return list(tomllib.loads((src / "pyproject.toml").read_text())["build-system"]["requires"])


def _in_root(root: Path, target: Target, *command: str) -> None:
    """Run command chrooted in root, in a mount namespace of its own (its /proc, /dev and /sys
    mounts go with it, whatever happens), on this machine's network (the package index).
    Not systemd-nspawn: where /run is not a tmpfs it fails on its way out, after the command."""
    shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
    # this machine's CA bundle: the index is reached the way this machine reaches it (a proxy
    # that re-signs TLS has its CA there, not in Debian's)
    if Path(HOST_CA).is_file():
        shutil.copyfile(HOST_CA, root / HOST_CA.lstrip("/"))
    mounts = (
        'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && '
        'mount --rbind /sys "$0/sys" && exec chroot "$0" /usr/bin/env -i HOME=/root '
        "PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 "
        f"QEMU_CPU={QEMU_CPU[target.machine]} "
        '"$@"'
    )
    _run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts, str(root), *command],
        command[0],
    )


def _run(argv: list[str], what: str) -> None:
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:]
        raise CrossBuildError(f"{what} failed: {tail[0] if tail else p.returncode}")
