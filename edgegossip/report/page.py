"""report.html: one page a run can be read from offline, written beside summary.json by
`emulate` and `fleet collect`. The run's settings, a row per device, the plots (inlined as data:
URIs, so the page is one file with nothing to fetch), the drop reasons and the loss on each link.

Rendered by Jinja2 with autoescaping on: device names, drop reasons and every other string come
from the devices' own records, and a device must not be able to put markup or script into the
operator's browser."""

from __future__ import annotations

import base64
from pathlib import Path

from edgegossip import catalog

NAME = "report.html"

TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<title>edgegossip {{ title }}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td.name, th.name { text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
.note { color: #a40; }
</style>
</head>
<body>
<h1>edgegossip {{ title }}</h1>
<p>{{ headline }}</p>
{% if alarm %}<p class="note">{{ alarm }}</p>{% endif %}

<h2>Settings</h2>
<table>
{% for k, v in settings %}<tr><th class="name">{{ k }}</th><td class="name">{{ v }}</td></tr>
{% endfor %}</table>

<h2>Devices</h2>
<table>
<tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in columns %}<td>{{ row[c] }}</td>{% endfor %}</tr>
{% endfor %}</table>

<h2>Plots</h2>
{% for p in plots %}<figure>
<img alt="{{ p.name }}" src="data:image/png;base64,{{ p.data }}">
</figure>
{% endfor %}

<h2>Drop reasons</h2>
{% if drops %}<table>
<tr><th class="name">device</th>{% for r in reasons %}<th>{{ r }}</th>{% endfor %}</tr>
{% for name, counts in drops %}<tr><td class="name">{{ name }}</td>
{% for r in reasons %}<td>{{ counts.get(r, 0) }}</td>{% endfor %}</tr>
{% endfor %}</table>{% else %}<p>No datagram was dropped.</p>{% endif %}

<h2>Loss per link</h2>
{% if links %}<table>
<tr><th class="name">receiver</th><th class="name">sender</th><th>observed loss</th></tr>
{% for r, s, loss in links %}<tr>
<td class="name">{{ r }}</td><td class="name">{{ s }}</td><td>{{ loss }}</td>
</tr>
{% endfor %}</table>
{% else %}<p>No link numbered any datagram (TCP, or a single device).</p>{% endif %}
</body>
</html>
"""

# heading: key of the summary's agent row (report/summary.py), and the factor it is shown at
COLUMNS = {
    "device": ("device", None),
    "test accuracy": ("accuracy", None),
    **{h: (key, None if scale == 1 else scale) for h, (key, scale) in catalog.columns().items()},
}


def _cell(v, factor=None):
    if factor is not None and isinstance(v, (int, float)):
        v = v * factor
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else v


def write(out: Path, title: str, summary: dict, settings: dict, names: dict | None = None) -> Path:
    """Write OUT/report.html from a summary (report/summary.py) and the run's settings; `names`
    maps agent ids to device names (a fleet), else agents are shown by id."""
    import jinja2

    names = names or {}
    agents = summary.get("agents", [])
    label = {a["agent"]: str(names.get(a["agent"], f"agent {a['agent']}")) for a in agents}
    rows = [
        {h: _cell(a.get(k), f) for h, (k, f) in COLUMNS.items()} | {"device": label[a["agent"]]}
        for a in agents
    ]
    rows.append(
        {h: "" for h in COLUMNS}
        | {"device": "average model", "test accuracy": _cell(summary.get("average_model_accuracy"))}
    )
    reasons = sorted({r for a in agents for r in (a.get("drops") or {})})
    drops = [(label[a["agent"]], a.get("drops") or {}) for a in agents if a.get("drops")]
    links = [
        (label[a["agent"]], str(names.get(int(peer), f"agent {peer}")), f"{loss:.2%}")
        for a in agents
        for peer, loss in sorted((a.get("link_loss") or {}).items(), key=lambda kv: int(kv[0]))
        if loss is not None
    ]
    plots = [
        {
            "name": Path(p).stem.replace("_", " "),
            "data": base64.b64encode(Path(p).read_bytes()).decode(),
        }
        for p in summary.get("plots", [])
        if p.endswith(".png") and Path(p).is_file()
    ]
    acc = summary.get("average_model_accuracy")
    obs = summary.get("observed_loss")
    headline = (
        f"{len(agents)} devices; average model {_cell(acc) or 'n/a'} on the MNIST test set; "
        f"observed loss {'n/a' if obs is None else f'{obs:.2%}'}"
    )
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    html = env.from_string(TEMPLATE).render(
        title=title,
        headline=headline,
        alarm=summary.get("loss_alarm"),
        settings=[(k, _cell(v)) for k, v in settings.items()],
        columns=list(COLUMNS),
        rows=rows,
        plots=plots,
        reasons=reasons,
        drops=drops,
        links=links,
    )
    path = out / NAME
    path.write_text(html)
    return path
