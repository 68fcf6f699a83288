"""Device targets: the Raspberry Pi OS releases and `fleet wheelhouse --for`. The compile under
emulation takes minutes (scripts/check-target.sh runs it whole, with its times in docs/results.md);
here the rest of the build runs for real: the package index's binary wheels for the target's
platform, beside an edgegossip wheel standing in for the compiled one."""

import zipfile

import pytest

from edgegossip.fleet import bundle, crossbuild
from edgegossip.fleet.targets import RELEASES, TARGETS, release_of


def test_a_release_is_named_by_its_images_date():
    assert release_of("2025-11-24").name == "trixie"
    assert release_of("2025-10-01").name == "trixie"
    assert release_of("2025-05-13").name == "bookworm"
    assert release_of("2021-10-30").name == "bullseye"
    assert [r.name for r in RELEASES] == ["trixie", "bookworm", "bullseye"]  # newest first
    t = TARGETS["trixie-arm64"]
    assert t.platform() == {"machine": "aarch64", "python": "3.13", "glibc": "2.41"}
    assert "manylinux_2_41_aarch64" in t.pip_platforms()
    assert "manylinux_2_42_aarch64" not in t.pip_platforms()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_wheelhouse_for_a_target_holds_only_wheels_that_platform_installs(
    tmp_path, monkeypatch, name
):
    target = TARGETS[name]
    fake = tmp_path / "built" / f"edgegossip-0.1.0-{target.abi()}-{target.abi()}-linux_aarch64.whl"
    fake.parent.mkdir()
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("edgegossip/__init__.py", "")
    monkeypatch.setattr(crossbuild, "wheel", lambda t, digest, progress: fake)
    m = bundle.build(tmp_path / "wh", (), progress=lambda s: None, target=target)
    assert m["platform"] == target.platform() and m["target"] == name
    assert m["zmq_draft"] is False  # the index's pyzmq: the udp transport needs nothing more
    names = {w.split("-")[0].lower() for w in m["wheels"]}
    assert {"edgegossip", "numpy", "pyzmq", "click", "tomli_w", "prometheus_client"} <= names
    for w in m["wheels"]:
        py, abi, plat = w[:-4].split("-")[-3:]
        assert plat == "any" or plat.endswith("aarch64"), w
        assert abi in (target.abi(), "abi3", "none"), w
    assert bundle.load(tmp_path / "wh")["release"] == m["release"]  # a manifest deploy takes
    again = bundle.build(tmp_path / "wh", (), progress=lambda s: None, target=target)
    assert again == m  # an unchanged tree: the wheelhouse is kept
