"""A compiled model on disk: the folder `edgegossip model compile` writes (compiler/write.py) and
every agent of a fleet trains from (models/compiled.py). This module owns its format: the file
names, the manifest as a typed record, and reading, verifying and copying a folder.

    DIR/manifest.json   what the model is (Manifest), and each file's SHA-256
    DIR/train.onnx      params, x, y -> loss, grad, logits, BatchNorm batch statistics
    DIR/infer.onnx      params, x -> logits (BatchNorm on the batch's statistics, no dropout)
    DIR/initial.npy     the exported weights, flat float32, laid out as params
    DIR/features.onnx   (a model fine-tuned after a frozen prefix) x -> the prefix's output,
    DIR/train-cached.onnx   and that output, y -> loss, grad: compiler/prefix.py
    DIR/model.onnx      the user's own inference model: `fleet collect` writes the trained
                        parameters back into it. As given, but in one file (an exporter's
                        external data, NAME.onnx.data, read in) and with each weight the
                        training graph trains under its own name (build.untied)

The artifact's digest is the SHA-256 of manifest.json, which names every other file's digest:
two devices with the same digest train the same model. Every file is checked against the
manifest before anything of it is used: a device trains exactly what was compiled, or refuses
to start with one line. Nothing here needs onnx: a device reads the folder with json and NumPy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edgegossip.errors import UsageError
from edgegossip.paths import sha256_of

FORMAT = "edgegossip-model/1"
MANIFEST = "manifest.json"
FILES = ("train.onnx", "infer.onnx", "initial.npy", "model.onnx")
PREFIX_FILES = ("features.onnx", "train-cached.onnx")  # with a frozen prefix (compiler/prefix.py)
MEMORY = "memory.json"  # a step's measured peak memory (models/footprint.py), not in the digest
LOSSES = ("cross-entropy", "mse")
INPUT_DTYPES = ("float32", "int64", "int32")  # features, or token ids
OLDEST_RUNTIME = "1.14"  # manifests before it was recorded were all made at opset 18


class ArtifactError(UsageError, ValueError):
    """A compiled model folder that is missing, altered or not ours (exit 2)."""


@dataclass(frozen=True)
class Slot:
    """One trained tensor's place in the flat parameter vector."""

    name: str
    shape: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class State:
    """A BatchNorm's running statistic: the training graph's output holding the batch's value,
    and the initializer of the user's model it is written back into."""

    output: str
    initializer: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Prefix:
    """A frozen prefix computed once per example: the cached graph's input and its shape."""

    input: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Manifest:
    loss: str
    input_name: str
    input_shape: tuple[int, ...]  # one example's, without the batch axis
    output_shape: tuple[int, ...]
    params: tuple[Slot, ...]
    opset: int
    onnxruntime: str = OLDEST_RUNTIME  # the oldest that runs the artifact (fleet deploy checks)
    input_dtype: str = "float32"
    state: tuple[State, ...] = ()
    prefix: Prefix | None = None
    files: dict[str, str] = field(default_factory=dict)  # name -> SHA-256
    source: dict[str, str] = field(default_factory=dict)  # {"file", "sha256"}
    untrained: tuple[str, ...] = ()  # weights left as exported, by the user's choice
    frozen: tuple[str, ...] = ()  # weights the user froze (--freeze, --train)
    exporter_changes: tuple[str, ...] = ()  # what the export changed of the model
    ops: tuple[str, ...] = ()

    @property
    def n_params(self) -> int:
        return sum(_size(p.shape) for p in self.params)

    @property
    def classes(self) -> int | None:
        """A classifier's number of classes; None for an mse model."""
        return self.output_shape[0] if self.loss == "cross-entropy" else None

    def to_json(self) -> dict[str, Any]:
        """The manifest.json form (`model compile --json` prints it)."""
        out: dict[str, Any] = {
            "format": FORMAT,
            "source": dict(self.source),
            "loss": self.loss,
            "input": {
                "name": self.input_name,
                "shape": list(self.input_shape),
                "dtype": self.input_dtype,
            },
            "output": {"shape": list(self.output_shape)},
            "classes": self.classes,
            "params": {
                "count": self.n_params,
                "layout": [
                    {"name": p.name, "shape": list(p.shape), "offset": p.offset}
                    for p in self.params
                ],
            },
            "state": [
                {"output": s.output, "initializer": s.initializer, "shape": list(s.shape)}
                for s in self.state
            ],
            "untrained": list(self.untrained),
            "frozen": list(self.frozen),
            "exporter_changes": list(self.exporter_changes),
            "ops": list(self.ops),
            "opset": self.opset,
            "onnxruntime": self.onnxruntime,
            "files": dict(self.files),
        }
        if self.prefix is not None:
            out["prefix"] = {"input": self.prefix.input, "shape": list(self.prefix.shape)}
        return out

    @classmethod
    def from_json(cls, d: Any, where: str) -> Manifest:
        """The manifest in d, every field checked: ArtifactError naming the first wrong one."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ArtifactError(
                f"{where}: not a compiled model ({FORMAT}); run `edgegossip model compile`"
            )
        try:
            return cls._parse(d)
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{where}: {_why(e)}") from None

    @classmethod
    def _parse(cls, d: dict) -> Manifest:
        loss = _one_of(d["loss"], LOSSES, "loss")
        dtype = _one_of(d["input"].get("dtype", "float32"), INPUT_DTYPES, "input dtype")
        files = d.get("files")
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise ValueError("names no files")
        for name in files:
            if "/" in name or name.startswith(".") or not name:
                raise ValueError(f"file name {name!r} is not in the folder")
        prefix = d.get("prefix")
        runtime = d.get("onnxruntime", OLDEST_RUNTIME)
        return cls(
            loss=loss,
            input_name=_text(d["input"]["name"], "input name"),
            input_shape=_shape(d["input"]["shape"], "input shape"),
            input_dtype=dtype,
            output_shape=_shape(d["output"]["shape"], "output shape"),
            params=_slots(d["params"]["layout"]),
            opset=_count(d["opset"], "opset"),
            onnxruntime=runtime if isinstance(runtime, str) else OLDEST_RUNTIME,
            state=tuple(
                State(
                    _text(s["output"], "state output"),
                    _text(s["initializer"], "state initializer"),
                    _shape(s["shape"], "state shape"),
                )
                for s in d.get("state", [])
            ),
            prefix=None
            if prefix is None
            else Prefix(_text(prefix["input"], "prefix input"), _shape(prefix["shape"], "prefix")),
            files=dict(files),
            source=dict(d.get("source") or {}),
            untrained=_texts(d.get("untrained", []), "untrained"),
            frozen=_texts(d.get("frozen", []), "frozen"),
            exporter_changes=_texts(d.get("exporter_changes", []), "exporter_changes"),
            ops=_texts(d.get("ops", []), "ops"),
        )


@dataclass(frozen=True)
class Artifact:
    """A compiled model folder, verified: its manifest and digest."""

    folder: Path
    manifest: Manifest
    digest: str

    def path(self, name: str) -> Path:
        if name not in self.manifest.files:
            raise ArtifactError(f"{self.folder}: holds no {name}")
        return self.folder / name

    @property
    def has_prefix(self) -> bool:
        return self.manifest.prefix is not None and PREFIX_FILES[0] in self.manifest.files


def is_artifact(name: str) -> bool:
    return (Path(name) / MANIFEST).is_file()


def read(folder: str | Path) -> Artifact:
    """The folder's manifest, checked, and every file it names checked against its SHA-256."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except OSError as e:
        raise ArtifactError(f"{path}: {e.strerror}") from None
    except ValueError:
        raise ArtifactError(f"{path}: not JSON") from None
    manifest = Manifest.from_json(data, str(path))
    for name, digest in manifest.files.items():
        if _sha256(folder / name) != digest:
            raise ArtifactError(
                f"{folder / name}: its SHA-256 is not the manifest's: altered or incomplete"
            )
    return Artifact(folder, manifest, hashlib.sha256(raw).hexdigest())


def write_manifest(folder: Path, manifest: Manifest) -> tuple[Manifest, str]:
    """manifest.json for the files manifest names, already in folder, with their digests; the
    manifest written and the artifact's digest."""
    written = replace(manifest, files={name: sha256_of(folder / name) for name in manifest.files})
    (folder / MANIFEST).write_text(json.dumps(written.to_json(), indent=2) + "\n")
    return written, sha256_of(folder / MANIFEST)


def copy(folder: str | Path, dest: Path) -> str:
    """Copy the compiled model in `folder` (checked) into the new folder `dest`: its manifest,
    the files it names and its measured footprint (MEMORY), nothing else; the digest."""
    artifact = read(folder)
    dest.mkdir(parents=True)
    for name in (MANIFEST, *artifact.manifest.files):
        shutil.copyfile(Path(folder) / name, dest / name)
    if (Path(folder) / MEMORY).is_file():  # a measurement, outside the digest: it travels too
        shutil.copyfile(Path(folder) / MEMORY, dest / MEMORY)
    if read(dest).digest != artifact.digest:  # changed while we copied
        raise ArtifactError(f"{folder}: changed while it was copied; copy it again")
    return artifact.digest


def _sha256(path: Path) -> str | None:
    try:
        return sha256_of(path)
    except OSError:
        return None


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _why(e: Exception) -> str:
    if isinstance(e, KeyError):
        return f"no {e.args[0]!r}"
    return str(e) if isinstance(e, ValueError) else "a field of the wrong type"


def _one_of(v: Any, allowed: tuple[str, ...], what: str) -> str:
    if v not in allowed:
        raise ValueError(f"{what} {v!r}: not one of {', '.join(allowed)}")
    return v


def _text(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"{what} is not a name")
    return v


def _texts(v: Any, what: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise ValueError(f"{what} is not a list of names")
    return tuple(v)


def _count(v: Any, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{what} {v!r} is not a count")
    return v


def _shape(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise ValueError(f"{what} is not a list of sizes")
    return tuple(_count(d, what) for d in v)


def _slots(layout: Any) -> tuple[Slot, ...]:
    if not isinstance(layout, list):
        raise ValueError("params layout is not a list")
    out, offset = [], 0
    for p in layout:
        slot = Slot(_text(p["name"], "param name"), _shape(p["shape"], "param shape"), 0)
        if _count(p["offset"], "param offset") != offset:
            raise ValueError(f"param {slot.name} is not where the layout puts it")
        out.append(Slot(slot.name, slot.shape, offset))
        offset += _size(slot.shape)
    return tuple(out)
