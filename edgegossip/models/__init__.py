"""NumPy models whose parameters live in one flat float32 vector (every layer is a view)."""

from __future__ import annotations

from edgegossip.models.base import Model


def make_model(name: str, seed: int = 0, inputs: int = 784, classes: int = 10) -> Model:
    """The named model for `inputs` features and `classes` labels (the seed's MNIST shapes by
    default; the CNN takes 28x28 images only), or the model compiled into the folder `name`
    (`edgegossip model compile`), whose manifest says its shapes."""
    if name not in MODELS:
        from edgegossip.models.compiled import CompiledModel, is_artifact

        if is_artifact(name):
            return CompiledModel(name)
    if name == "mlp":
        from edgegossip.models.mlp import MLP

        if (inputs, classes) == (784, 10):
            return MLP.seed_mlp(seed)
        return MLP([inputs, 1024, 1024, 1024, classes], 0.2, 0.5, seed)
    if name == "logreg":
        from edgegossip.models.mlp import MLP

        return MLP([inputs, classes], dropout_in=0.0, dropout_hidden=0.0, seed=seed)
    if name == "cnn":
        if (inputs, classes) != (784, 10):
            raise ValueError("the cnn takes 28x28 images in 10 classes (inputs 784, classes 10)")
        from edgegossip.models.cnn import CNN

        return CNN(seed=seed)
    raise ValueError(
        f"unknown model {name!r}: choose mlp, logreg or cnn, or the folder of a compiled model "
        "(edgegossip model compile)"
    )


def known(name: str) -> bool:
    """A model name, or a folder holding a compiled model's manifest."""
    from edgegossip.models.compiled import is_artifact

    return name in MODELS or is_artifact(name)


MODELS = ("mlp", "logreg", "cnn")
EXPORTABLE = ("mlp", "logreg")  # to ONNX (models/onnx_backend.py)

# onnx and onnxruntime are an optional extra: PyPI has no wheels for them on 32-bit ARM, and a
# NumPy-only agent does not need them
ONNX_MISSING = (
    "the onnx backend and ONNX export need onnx and onnxruntime, which are not "
    "installed: pip install 'edgegossip[onnx]'"
)


def onnx_available() -> bool:
    from importlib.util import find_spec

    return find_spec("onnx") is not None and find_spec("onnxruntime") is not None
