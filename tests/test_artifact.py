"""The compiled model's folder (edgegossip/artifact.py): the manifest is read as a typed record,
every field checked, so a device refuses a wrong one in one line before onnxruntime sees it;
older manifests (no onnxruntime, dtype or state) still read; what compile writes reads back."""

import json

import pytest

from edgegossip import artifact
from edgegossip.artifact import ArtifactError, Manifest
from tests.helpers.onnx_models import compile_to, softmax_regression


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("artifact")
    return compile_to(softmax_regression(tmp / "softmax.onnx"), tmp / "compiled")


def test_what_compile_writes_reads_back_typed(folder):
    a = artifact.read(folder)
    m = a.manifest
    assert m.loss == "cross-entropy" and m.classes == 10 and m.n_params == 7850
    assert [(p.name, p.offset) for p in m.params][0][1] == 0
    assert set(m.files) == set(artifact.FILES) and not a.has_prefix
    raw = json.loads((folder / artifact.MANIFEST).read_text())
    assert m.to_json() == raw  # one form on disk and in memory
    assert Manifest.from_json(raw, "m") == m


def test_an_older_manifest_reads_with_the_defaults_of_its_time():
    raw = {
        "format": artifact.FORMAT,
        "loss": "mse",
        "input": {"name": "x", "shape": [4]},
        "output": {"shape": [4]},
        "params": {"count": 20, "layout": [{"name": "W", "shape": [4, 5], "offset": 0}]},
        "opset": 18,
        "files": {},
    }
    m = Manifest.from_json(raw, "m")
    assert (m.onnxruntime, m.input_dtype, m.state, m.classes) == ("1.14", "float32", (), None)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(format="other/1"), "not a compiled model"),
        (lambda d: d.update(loss="hinge"), "loss 'hinge': not one of"),
        (lambda d: d["input"].update(dtype="float16"), "input dtype 'float16'"),
        (lambda d: d["input"].update(shape=[1, -28]), "input shape -28 is not a count"),
        (lambda d: d["params"]["layout"][0].update(offset=3), "is not where the layout puts"),
        (lambda d: d["files"].update({"../etc/passwd": "x"}), "is not in the folder"),
        (lambda d: d.pop("opset"), "no 'opset'"),
        (lambda d: d.update(state=[{"output": 1}]), "state output is not a name"),
        (lambda d: d.update(frozen="W"), "frozen is not a list of names"),
    ],
)
def test_a_wrong_field_is_one_line_naming_it(folder, change, words):
    raw = json.loads((folder / artifact.MANIFEST).read_text())
    change(raw)
    with pytest.raises(ArtifactError) as e:
        Manifest.from_json(raw, "manifest.json")
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert str(e.value).startswith("manifest.json: ")


def test_a_copy_holds_the_named_files_only_and_the_same_digest(folder, tmp_path):
    (folder / "stray.txt").write_text("not the model's")
    try:
        digest = artifact.copy(folder, tmp_path / "copy")
    finally:
        (folder / "stray.txt").unlink()
    assert digest == artifact.read(folder).digest
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(
        [artifact.MANIFEST, *artifact.FILES]
    )
