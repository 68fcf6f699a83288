"""report.html from a real (loopback) emulated run, opened in headless Chromium: every heading
there, every image decoded, a screenshot that is not blank; and a device's strings that try to
put markup in the operator's browser come out as text."""

import http.server
import json
import shutil
import subprocess
import threading
from functools import partial

import pytest
from click.testing import CliRunner

from edgegossip.cli.app import cli
from edgegossip.report import page

HEADINGS = ["Settings", "Devices", "Plots", "Drop reasons", "Loss per link"]
# same origin as the report (served from its folder), so this page may look inside it
CHECK = """<!doctype html><html><body><pre id="out">pending</pre>
<iframe id="r" src="report.html" width="1200" height="800"></iframe>
<script>
document.getElementById("r").addEventListener("load", function () {
  var d = this.contentDocument;
  var imgs = Array.from(d.images);
  document.getElementById("out").textContent = JSON.stringify({
    headings: Array.from(d.querySelectorAll("h2")).map(function (h) { return h.textContent; }),
    images: imgs.length,
    broken: imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); }).length,
    tables: d.querySelectorAll("table").length,
    device_rows: d.querySelectorAll("table")[1].rows.length,
    accuracies: Array.from(d.querySelectorAll("table")[1].rows).slice(1).map(
      function (r) { return r.cells[1].textContent; }),
    scripts: d.querySelectorAll("script").length,
    bold: d.querySelectorAll("b").length
  });
});
</script></body></html>"""


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: bash scripts/system-packages.sh install test")
    return exe


def _serve(folder):
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _browse(folder, tmp_path, *args):
    """Chromium, headless, on `folder` served over loopback; its own profile in tmp_path."""
    httpd = _serve(folder)
    try:
        return subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={tmp_path / 'chromium-profile'}",
                "--virtual-time-budget=5000",
                *args[:-1],
                f"http://127.0.0.1:{httpd.server_address[1]}/{args[-1]}",
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def run(tmp_path_factory, mnist_data):
    out = tmp_path_factory.mktemp("report") / "run"
    res = CliRunner().invoke(
        cli,
        [
            "emulate",
            "--backend",
            "loopback",
            "--nodes",
            "3",
            "--model",
            "logreg",
            "--duration",
            "8",
            "--loss",
            "0.1",
            "--p",
            "0.05",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    return out, json.loads(res.output.strip().splitlines()[-1])


def test_report_renders_in_chromium(run, tmp_path):
    out, summary = run
    assert summary["report"] == str(out / "report.html")
    pngs = [p for p in summary["plots"] if p.endswith(".png")]
    assert len(pngs) == 4 and len(summary["plots"]) == 8  # PNG and SVG each
    (out / "check.html").write_text(CHECK)
    dom = _browse(out, tmp_path, "--dump-dom", "check.html")
    assert dom.returncode == 0, dom.stderr[-2000:]
    got = json.loads(dom.stdout.split('<pre id="out">')[1].split("</pre>")[0])
    assert got["headings"] == HEADINGS
    assert got["images"] == 4 and got["broken"] == 0
    assert got["device_rows"] == 1 + 3 + 1  # heading, three agents, the average model
    # every row, the average model's too, shows its test accuracy as the summary has it
    want = [a["accuracy"] for a in summary["agents"]] + [summary["average_model_accuracy"]]
    assert [float(x) for x in got["accuracies"]] == pytest.approx(want, abs=1e-4)
    shot = tmp_path / "report.png"
    res = _browse(out, tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", "report.html")
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    from matplotlib.image import imread

    px = imread(shot)
    assert px.shape[0] == 2400 and px.shape[1] == 1280
    # not a blank page: the plots' lines and the tables' text put plenty of non-white pixels
    assert (px[..., :3].min(axis=2) < 0.5).mean() > 0.01


def test_a_device_cannot_put_markup_in_the_report(run, tmp_path):
    out, summary = run
    evil = "<script>alert(1)</script><b>x</b>"
    s = dict(summary, agents=[dict(a, drops={evil: 3}) for a in summary["agents"]])
    bad = tmp_path / "bad"
    bad.mkdir()
    page.write(bad, evil, s, {evil: evil}, {a["agent"]: evil for a in summary["agents"]})
    html = (bad / "report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    (bad / "check.html").write_text(CHECK)
    dom = _browse(bad, tmp_path, "--dump-dom", "check.html")
    got = json.loads(dom.stdout.split('<pre id="out">')[1].split("</pre>")[0])
    assert got["scripts"] == 0 and got["bold"] == 0
