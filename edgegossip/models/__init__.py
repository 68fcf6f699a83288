"""The models a fleet trains, in one registry: a named NumPy model (NAMED, each declared once
with what it takes and what runs it), or the folder of a model compiled from the user's own
ONNX file (`edgegossip model compile`, edgegossip/artifact.py), whose manifest says its shapes.
Parameters always live in one flat float32 vector (every layer is a view)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgegossip.models.base import Model


@dataclass(frozen=True)
class Named:
    """A model built in NumPy here."""

    make: Callable[[int, int, int], Model]  # (seed, inputs, classes)
    help: str
    shape: tuple[int, int] | None = None  # the only (inputs, classes) it takes, if it is fixed
    onnx: bool = False  # runs on the onnx backend and exports to ONNX (models/onnx_backend.py)


def _mlp(seed: int, inputs: int, classes: int) -> Model:
    from edgegossip.models.mlp import MLP

    if (inputs, classes) == (784, 10):
        return MLP.seed_mlp(seed)
    return MLP([inputs, 1024, 1024, 1024, classes], 0.2, 0.5, seed)


def _logreg(seed: int, inputs: int, classes: int) -> Model:
    from edgegossip.models.mlp import MLP

    return MLP([inputs, classes], dropout_in=0.0, dropout_hidden=0.0, seed=seed)


def _cnn(seed: int, inputs: int, classes: int) -> Model:
    from edgegossip.models.cnn import CNN

    return CNN(seed=seed)


NAMED = {
    "mlp": Named(_mlp, "the seed paper's 784-1024-1024-1024-10 MLP with dropout", onnx=True),
    "logreg": Named(_logreg, "softmax regression", onnx=True),
    "cnn": Named(_cnn, "a small CNN for 28x28 images", shape=(784, 10)),
}
MODELS = tuple(NAMED)
EXPORTABLE = tuple(n for n, m in NAMED.items() if m.onnx)  # to ONNX (models/onnx_backend.py)
CHOICES_TEXT = f"{', '.join(MODELS)} or the folder of a compiled model (edgegossip model compile)"


def make_model(
    name: str, seed: int = 0, inputs: int = 784, classes: int = 10, threads: int = 1
) -> Model:
    """The named model for `inputs` features and `classes` labels (the seed's MNIST shapes by
    default), or the model compiled into the folder `name` (its step on `threads` threads, 0
    for onnxruntime's default; the named models' NumPy runs on one)."""
    spec = NAMED.get(name)
    if spec is None:
        from edgegossip.artifact import is_artifact
        from edgegossip.models.compiled import CompiledModel

        if is_artifact(name):
            return CompiledModel(name, threads=threads)
        raise ValueError(f"unknown model {name!r}: choose {CHOICES_TEXT}")
    problem = shape_problem(name, inputs, classes)
    if problem:
        raise ValueError(problem)
    return spec.make(seed, inputs, classes)


def known(name: str) -> bool:
    """A model name, or a folder holding a compiled model's manifest."""
    from edgegossip.artifact import is_artifact

    return name in NAMED or is_artifact(name)


def resolved(name: str) -> str:
    """The name, or a compiled model's folder made absolute (for processes run elsewhere);
    ValueError for neither."""
    if not known(name):
        raise ValueError(f"model {name!r}: choose {CHOICES_TEXT}")
    return name if name in NAMED else str(Path(name).resolve())


def shape_problem(name: str, inputs: int, classes: int) -> str | None:
    spec = NAMED.get(name)
    if spec is None or spec.shape is None or (inputs, classes) == spec.shape:
        return None
    return f"the {name} takes inputs {spec.shape[0]}, classes {spec.shape[1]} only"


def backend_problem(name: str, backend: str) -> str | None:
    """Why `backend` cannot train `name`, or None. A compiled model always runs in
    onnxruntime, whatever the backend setting says."""
    spec = NAMED.get(name)
    if backend == "onnx" and spec is not None and not spec.onnx:
        return f"onnx runs {', '.join(EXPORTABLE)} and compiled models, not {name}"
    return None


# onnx and onnxruntime are an optional extra: PyPI has no wheels for them on 32-bit ARM, and a
# NumPy-only agent does not need them
ONNX_MISSING = (
    "the onnx backend and ONNX export need onnx and onnxruntime, which are not "
    "installed: pip install 'edgegossip[onnx]'"
)


def onnx_available() -> bool:
    from importlib.util import find_spec

    return find_spec("onnx") is not None and find_spec("onnxruntime") is not None
