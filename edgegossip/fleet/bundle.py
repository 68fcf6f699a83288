"""What deploy ships: one wheelhouse for the devices' platform (built once, installed everywhere:
a fleet of 20 Pis never compiles the kernels and pyzmq 20 times) and, per device, its config, its
link keys, its control certificates, its data, the unit and the install script.

A wheelhouse holds the edgegossip wheel (kernels compiled), the draft-enabled pyzmq wheel that
`make venv` built, and binary wheels of the other dependencies at the versions this machine runs.
Its release id is a digest of the wheels: a device that already has that release installs nothing."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import json
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
MANIFEST = "edgegossip-wheelhouse.json"


class BundleError(RuntimeError):
    pass


def source_digest() -> str:
    """Digest of the sources a wheel is built from: a stale wheelhouse is rebuilt, a current one
    reused."""
    h = hashlib.sha256()
    files = sorted([*PROJECT.glob("edgegossip/**/*.py"), *PROJECT.glob("native/**/*"),
                    PROJECT / "pyproject.toml", PROJECT / "setup.py"])
    for f in files:
        if f.is_file():
            h.update(str(f.relative_to(PROJECT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def this_platform() -> dict:
    return {"machine": platform.machine(), "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}


def _pip(*args: str, env: dict | None = None) -> None:
    p = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:]
        raise BundleError(f"pip {args[0]} failed: {tail[0] if tail else p.returncode}")


def build(dest: Path, extras: tuple[str, ...] = (), progress=print) -> dict:
    """Build (or reuse) a wheelhouse for this machine's platform in dest; its manifest."""
    digest = source_digest()
    manifest_path = dest / MANIFEST
    if manifest_path.is_file():
        m = json.loads(manifest_path.read_text())
        if m.get("source") == digest and m.get("platform") == this_platform() and \
                set(extras) <= set(m.get("extras", [])):
            return m
    if not (PROJECT / "pyproject.toml").is_file():
        raise BundleError("building a wheelhouse needs the edgegossip source tree; "
                          "pass --wheelhouse DIR")
    zmq_wheels = sorted(PROJECT.glob(".cache/pyzmq/wheels-*/pyzmq-*.whl"))
    if not zmq_wheels:
        raise BundleError("no draft-enabled pyzmq wheel in .cache/pyzmq: run `make venv` first")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    progress(f"building the wheelhouse for {this_platform()['machine']} Python "
             f"{this_platform()['python']} in {dest} (once per source change)")
    _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest), str(PROJECT))
    shutil.copy2(zmq_wheels[-1], dest)
    pins = [f"{name}=={md.version(name)}" for name in ("numpy", "click")]
    if "onnx" in extras:
        pins += [f"{name}=={md.version(name)}" for name in ("onnx", "onnxruntime")]
    # binary wheels only, with their dependencies (a device compiles nothing)
    _pip("download", "--quiet", "--only-binary", ":all:", "-d", str(dest), *pins)
    wheels = sorted(p.name for p in dest.glob("*.whl"))
    h = hashlib.sha256()
    for w in wheels:
        h.update(w.encode() + (dest / w).read_bytes())
    manifest = {"release": h.hexdigest()[:12], "source": digest, "platform": this_platform(),
                "extras": list(extras), "wheels": wheels,
                "bytes": sum((dest / w).stat().st_size for w in wheels),
                "abi": sysconfig.get_config_var("SOABI")}
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def load(dest: Path) -> dict:
    try:
        return json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        raise BundleError(f"{dest}: not a wheelhouse (no {MANIFEST}); "
                          "make one with `edgegossip fleet wheelhouse`") from None


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
