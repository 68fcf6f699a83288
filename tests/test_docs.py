"""Issue 44: the README is a first page (short, the Raspberry Pi path on its first screen), and
the docs' references are what the declarations make: a setting or a metric added without
regenerating them fails here."""

import re
from pathlib import Path

import pytest

from edgegossip import reference

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


@pytest.mark.parametrize("page", sorted(reference.PAGES))
def test_generated_reference_is_committed_as_made(page):
    committed = (ROOT / "docs" / page).read_text()
    assert committed == reference.PAGES[page](), (
        f"docs/{page} is not what its declarations make: run `python -m edgegossip.reference docs/`"
    )


def test_every_setting_and_drop_reason_is_in_the_references():
    from edgegossip.config import HELP
    from edgegossip.dataplane.drops import DROPS

    config_page, metrics_page = reference.configuration(), reference.metrics()
    assert all(f"| `{name}` |" in config_page for name in HELP)
    assert all(f"| `{reason}` |" in metrics_page for reason in DROPS)


def test_readme_is_a_first_page_with_the_pi_path_on_its_first_screen():
    lines = README.read_text().splitlines()
    assert len(lines) <= 300
    first_screen = "\n".join(lines[:60])
    assert "edgegossip fleet init" in first_screen and "fleet flash" in first_screen


def _slug(heading: str) -> str:
    """The anchor GitHub and MkDocs' toc give a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_readme_links_name_files_and_anchors_that_exist():
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text()):
        if re.match(r"https?://", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        assert file.exists(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, target


def test_the_catalog_declares_each_metric_once_and_summarises_as_declared():
    from edgegossip import catalog

    keys = [m.key for m in catalog.METRICS]
    series = [m.prometheus for m in catalog.METRICS if m.prometheus]
    headings = [m.column for m in catalog.METRICS if m.column]
    assert len(set(keys)) == len(keys) and len(set(series)) == len(series)
    assert len(set(headings)) == len(headings)
    assert all(m.label for m in catalog.METRICS if m.shape != "number")
    assert all(m.values for m in catalog.METRICS if m.shape == "state")
    records = [{"step": 5, "peak_rss_mb": 90.0}, {"step": 9, "peak_rss_mb": 80.0}]
    row = catalog.summary_row(records[-1], records)
    assert row["steps"] == 9 and row["peak_rss_mb"] == 90.0  # last, and the largest
    assert row["datagrams_lost"] == 0 and row["drops"] == {}  # never reported: the empty value


def test_the_board_profiles_table_is_the_profiles():
    """docs/usage.md's table of `emulate --devices` boards is what profiles.PROFILES says."""
    from edgegossip.emulate import profiles

    assert profiles.table() in (ROOT / "docs" / "usage.md").read_text()
