"""What deploy ships: one wheelhouse for the devices' platform (built once, installed everywhere:
a fleet of 20 Pis never compiles the kernels and pyzmq 20 times) and, per device, its config, its
link keys, its control certificates, its data, the unit and the install script.

A wheelhouse holds the edgegossip wheel (kernels compiled; built from the source tree, or repacked
from a regular install), pyzmq (the draft-enabled wheel `make venv` built, else the package
index's), and binary wheels of the other dependencies at the versions this machine runs.
Its release id is a digest of the wheels: a device that already has that release installs
nothing."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import io
import json
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

from edgegossip import paths
from edgegossip.errors import EdgegossipError, UsageError
from edgegossip.fleet import crossbuild
from edgegossip.fleet.targets import Target
from edgegossip.paths import sha256_of

# the optional dependencies a wheelhouse or a device install may add (pyproject.toml's extras)
EXTRAS = ("onnx",)

MANIFEST = "edgegossip-wheelhouse.json"


class BundleError(EdgegossipError, RuntimeError):
    pass


def source_digest() -> str:
    """Digest of what the edgegossip wheel is made from (the source tree, or the installed
    package): a stale wheelhouse is rebuilt, a current one reused."""
    h = hashlib.sha256()
    src = paths.source_tree()
    if src is not None:
        base = src
        files = [
            *src.glob("edgegossip/**/*.py"),
            *src.glob("native/**/*"),
            *src.glob("devices/**/*"),
            src / "pyproject.toml",
            src / "setup.py",
        ]
    else:
        base = Path(__file__).resolve().parents[2]
        files = [
            f
            for f in Path(__file__).resolve().parents[1].rglob("*")
            if "__pycache__" not in f.parts
        ]
    for f in sorted(files):
        if f.is_file():
            h.update(str(f.relative_to(base)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def this_platform() -> dict:
    """What a wheelhouse built here runs on: this machine, this Python, and this glibc or a
    newer one (a wheel compiled here links against this glibc's symbols)."""
    return {
        "machine": platform.machine(),
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "glibc": platform.libc_ver()[1],
    }


class PlatformMismatch(UsageError, ValueError):
    """A device whose platform the wheelhouse does not fit: refused before anything is sent."""


def misfits(system: dict, wheels: dict) -> list[str]:
    """Why wheels for the platform `wheels` cannot run on `system` (both as this_platform()
    gives them; a key missing or None on either side is not judged): the keys that differ,
    glibc only when the system's is older."""
    out = [
        k
        for k in ("machine", "python")
        if system.get(k) and wheels.get(k) and system[k] != wheels[k]
    ]
    have, need = system.get("glibc"), wheels.get("glibc")
    if have and need and _version(have) < _version(need):
        out.append("glibc")
    return out


def describe(p: dict) -> str:
    """`aarch64 Python 3.13 glibc 2.41`, from what is known."""
    parts = [p.get("machine"), p.get("python") and f"Python {p['python']}"]
    parts.append(p.get("glibc") and f"glibc {p['glibc']}")
    return " ".join(x for x in parts if x) or "an unknown platform"


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _pip(*args: str, env: dict | None = None) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env
    )
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:]
        raise BundleError(f"pip {args[0]} failed: {tail[0] if tail else p.returncode}")


def core_dependencies() -> list[str]:
    """The names of edgegossip's own requirements without an extra (pyproject.toml's
    dependencies), as installed here: what every device needs."""
    return [re.split(r"[\s<>=!~\[(;]", r, maxsplit=1)[0] for r in requirements()]


def _draft_pyzmq() -> Path | None:
    """The draft-enabled pyzmq wheel scripts/install-pyzmq-draft.sh built for this Python."""
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    found = sorted(
        w
        for w in (paths.cache_dir() / "pyzmq").glob("wheels-*/pyzmq-*.whl")
        if f"-{tag}-" in w.name and platform.machine() in w.name
    )
    return found[-1] if found else None


def _repack_installed(dest: Path) -> None:
    """The installed edgegossip (a regular install: no source tree) as a wheel again, from the
    files its RECORD lists, so an operator who ran `pip install edgegossip` can ship it."""
    dist = md.distribution("edgegossip")
    tags = [
        ln.split(":", 1)[1].strip()
        for ln in (dist.read_text("WHEEL") or "").splitlines()
        if ln.startswith("Tag:")
    ]
    if not tags:
        raise BundleError(
            "the installed edgegossip has no WHEEL tag to repack; reinstall it with pip"
        )
    info = f"edgegossip-{dist.version}.dist-info"
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    rows = []
    with zipfile.ZipFile(
        dest / f"edgegossip-{dist.version}-{tags[0]}.whl", "w", zipfile.ZIP_DEFLATED
    ) as z:
        for f in dist.files or []:
            name = str(f)
            if name in skip or name.startswith("..") or "__pycache__" in name:
                continue  # pip writes these (and the console script) again on install
            data = Path(f.locate()).read_bytes()
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{name},sha256={digest},{len(data)}")
        z.writestr(f"{info}/RECORD", "\n".join([*rows, f"{info}/RECORD,,"]) + "\n")


def build(
    dest: Path, extras: tuple[str, ...] = (), progress=print, target: Target | None = None
) -> dict:
    """Build (or reuse) a wheelhouse in dest, for this machine's platform or for a device
    target (fleet/targets.py); its manifest.

    For this machine, pyzmq is the draft-enabled wheel `make venv` built when there is one (the
    `zmq` transport needs it), otherwise the package index's binary wheel (`udp` and the control
    socket need nothing more); the manifest says which. For a target, the edgegossip wheel is
    compiled in that target's root under emulation (crossbuild.py) and every other wheel is the
    package index's binary wheel for that platform, at the newest version pyproject allows (the
    versions this machine runs may have no wheel for the target's Python)."""
    digest = source_digest()
    platform_ = target.platform() if target else this_platform()
    manifest_path = dest / MANIFEST
    if manifest_path.is_file():
        try:
            m = load(dest)
        except BundleError:
            m = {}  # not one we can trust: build it again
        if (
            m.get("source") == digest
            and m.get("platform") == platform_
            and set(extras) <= set(m.get("extras", []))
        ):
            return m
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    progress(
        f"building the wheelhouse for {describe(platform_)} in {dest} (once per source change)"
    )
    pins, foreign, draft = _sources(dest, extras, progress, target, digest)
    # binary wheels only, with their dependencies (a device compiles nothing)
    _pip("download", "--quiet", "--only-binary", ":all:", *foreign, "-d", str(dest), *pins)
    wheels = sorted(p.name for p in dest.glob("*.whl"))
    digests = {w: sha256_of(dest / w) for w in wheels}
    manifest = {
        "release": release_of(digests),
        "source": digest,
        "platform": platform_,
        "target": target.name if target else None,
        "extras": list(extras),
        "wheels": wheels,
        "sha256": digests,
        "zmq_draft": draft is not None,
        "bytes": sum((dest / w).stat().st_size for w in wheels),
        "abi": (
            f"cpython-{target.abi()[2:]}-{target.machine}-linux-gnu"
            if target
            else sysconfig.get_config_var("SOABI")
        ),
    }
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _sources(dest: Path, extras, progress, target, digest: str):
    """The edgegossip wheel (and a draft pyzmq) put into dest; the pins and the pip options
    for every other wheel; the draft pyzmq's path or None."""
    draft = None
    if target is not None:
        shutil.copy2(crossbuild.wheel(target, digest, progress), dest)
        pins = requirements(extras)
        foreign = ["--python-version", target.release.python, "--implementation", "cp"]
        foreign += ["--abi", target.abi(), "--abi", "abi3", "--abi", "none"]
        for tag in target.pip_platforms():
            foreign += ["--platform", tag]
    else:
        src = paths.source_tree()
        if src is not None:
            _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest), str(src))
        else:
            _repack_installed(dest)
        pins = [f"{name}=={md.version(name)}" for name in core_dependencies() if name != "pyzmq"]
        draft = _draft_pyzmq()
        if draft is not None:
            shutil.copy2(draft, dest)
        else:
            pins.append(f"pyzmq=={md.version('pyzmq')}")
        if "onnx" in extras:
            pins += [f"{name}=={md.version(name)}" for name in ("onnx", "onnxruntime")]
        foreign = []
    return pins, foreign, draft


def requirements(extras: tuple[str, ...] = ()) -> list[str]:
    """edgegossip's requirements as pyproject states them (`numpy>=1.24`), the core ones and
    those of the extras given."""
    out = []
    for req in md.requires("edgegossip") or []:
        spec, _, marker = req.partition(";")
        m = re.search(r'extra\s*==\s*"([^"]+)"', marker)
        if m is None or m.group(1) in extras:
            out.append(spec.strip())
    return out


_RELEASE = re.compile(r"[0-9a-f]{12}")
_WHEEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\.whl")


def release_of(digests: dict[str, str]) -> str:
    """The release id: a digest of every wheel's name and bytes, so it names exactly them."""
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(f"{name}\0{digests[name]}\n".encode())
    return h.hexdigest()[:12]


def load(dest: Path) -> dict:
    """The wheelhouse's manifest, checked before anything of it is used: a wheelhouse may come
    from another machine, and its release goes into shells run as root on every device and its
    wheel names into paths. The release must be the 12-hex-digit digest of the wheels it lists,
    each wheel a plain file name of a regular file in dest whose SHA-256 is the listed one."""
    try:
        m = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        raise BundleError(
            f"{dest}: not a wheelhouse (no {MANIFEST}); make one with `edgegossip fleet wheelhouse`"
        ) from None

    def bad(why: str) -> BundleError:
        return BundleError(
            f"{dest}: refusing the wheelhouse: {why}; build it again with "
            "`edgegossip fleet wheelhouse`"
        )

    if not isinstance(m, dict):
        raise bad("its manifest is not an object")
    wheels, digests = m.get("wheels"), m.get("sha256")
    if not isinstance(wheels, list) or not wheels:
        raise bad("it lists no wheels")
    if not isinstance(digests, dict) or sorted(digests) != sorted(wheels):
        raise bad("it has no SHA-256 for every wheel it lists")
    for w in wheels:
        if not isinstance(w, str) or not _WHEEL.fullmatch(w):
            raise bad(f"{w!r} is not a plain wheel file name")
        f = dest / w
        if f.is_symlink() or not f.is_file():
            raise bad(f"{w} is not a file in it")
        if sha256_of(f) != digests[w]:
            raise bad(f"{w} does not have the SHA-256 its manifest gives")
    release = m.get("release")
    if not isinstance(release, str) or not _RELEASE.fullmatch(release):
        raise bad(f"its release {release!r} is not a 12-digit hex digest")
    if release != release_of(digests):
        raise bad("its release is not the digest of its wheels")
    plat, extras = m.get("platform"), m.get("extras", [])
    if not isinstance(plat, dict) or not all(isinstance(v, str) for v in plat.values()):
        raise bad("its platform is not a table of names")
    if not isinstance(extras, list) or not set(extras) <= set(EXTRAS):
        raise bad(f"its extras {extras!r} are not among {', '.join(EXTRAS)}")
    return m


def tar(files: dict[str, bytes | Path]) -> bytes:
    """An uncompressed tar of {name in archive: content or file}: wheels do not compress."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, content in files.items():
            if isinstance(content, Path):
                t.add(str(content), arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), 0o600
                t.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def runtime_problem(manifest: dict, needed: str) -> str | None:
    """Why this wheelhouse cannot run a compiled model that needs onnxruntime `needed` or
    newer (its manifest's "onnxruntime"), or None."""
    have = [w.split("-")[1] for w in manifest.get("wheels", []) if w.startswith("onnxruntime-")]
    if not have:
        return "it has no onnxruntime wheel"
    if _version(have[0]) < _version(needed):
        return (
            f"its onnxruntime {have[0]} is older than the {needed} the compiled model's opset needs"
        )
    return None
