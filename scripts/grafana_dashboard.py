"""Build the fleet's Grafana dashboard (devices/grafana/edgegossip.json) with Grafana's own
Foundation SDK, whose types are generated from Grafana's dashboard schema: a panel option that
the schema does not have cannot be written here. Run it after changing a panel:

    .venv/bin/python scripts/grafana_dashboard.py devices/grafana/edgegossip.json

Every query names metrics of control/prometheus.py (and the client library's process_*), on
the job `fleet prometheus` targets, each series' name from edgegossip/catalog.py;
tests/test_prometheus.py (test_the_dashboard_queries_what_agents_serve) checks each name against
a real scrape and that this script still writes the committed file."""

from __future__ import annotations

import json
import sys

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders import heatmap, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos

from edgegossip.catalog import METRICS, series

# each metric's series, by its key in the catalog
S = {m.key: series(m.key) for m in METRICS if m.prometheus}
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job="edgegossip", fleet=~"$fleet", device=~"$device"'
W, H = 12, 8  # half the dashboard's width each


def q(expr: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).datasource(DS)


def series(title: str, unit: str, *queries: prometheus.Dataquery, n: int) -> timeseries.Panel:
    p = timeseries.Panel().id(n + 1).title(title).unit(unit).datasource(DS)
    p = p.grid_pos(GridPos(h=H, w=W, x=(n % 2) * W, y=(n // 2) * H))
    for ref, query in zip("ABCDEFGH", queries):
        p = p.with_target(query.ref_id(ref))
    return p


def build() -> dict:
    panels = [
        (
            "held-out accuracy",
            "percentunit",
            [q(f"{S['accuracy']}{{{SEL}}}", "{{device}}")],
        ),
        ("training loss", "none", [q(f"{S['loss']}{{{SEL}}}", "{{device}}")]),
        ("steps per second", "none", [q(f"deriv({S['step']}{{{SEL}}}[5m])", "{{device}}")]),
        (
            "exchanges per second, by outcome",
            "none",
            [
                q(
                    f"sum by (device, outcome) (rate({S['exchanges']}{{{SEL}}}[5m]))",
                    "{{device}} {{outcome}}",
                )
            ],
        ),
        (
            "datagrams dropped per second, by reason",
            "none",
            [
                q(
                    f"sum by (device, reason) (rate({S['drops']}{{{SEL}}}[5m]))",
                    "{{device}} {{reason}}",
                )
            ],
        ),
        (
            "traffic",
            "Bps",
            [
                q(f"rate({S['bytes_sent']}{{{SEL}}}[5m])", "{{device}} sent"),
                q(f"rate({S['bytes_received']}{{{SEL}}}[5m])", "{{device}} received"),
            ],
        ),
        (
            "memory",
            "bytes",
            [
                q(f"process_resident_memory_bytes{{{SEL}}}", "{{device}} resident"),
                q(f"{S['peak_rss_mb']}{{{SEL}}}", "{{device}} peak"),
            ],
        ),
        (
            "SD card writes",
            "Bps",
            [q(f"rate({S['disk_written_mb']}{{{SEL}}}[5m])", "{{device}} written")],
        ),
        ("disk free", "bytes", [q(f"{S['disk_free_mb']}{{{SEL}}}", "{{device}}")]),
        ("checkpoint age", "s", [q(f"{S['checkpoint_age_s']}{{{SEL}}}", "{{device}}")]),
    ]
    dash = (
        d.Dashboard("edgegossip fleet")
        .uid("edgegossip-fleet")
        .tags(["edgegossip"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(d.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            d.QueryVariable("fleet")
            .label("fleet")
            .datasource(DS)
            .query("label_values(edgegossip_build_info, fleet)")
            .multi(True)
            .include_all(True)
        )
        .with_variable(
            d.QueryVariable("device")
            .label("device")
            .datasource(DS)
            .query('label_values(edgegossip_build_info{fleet=~"$fleet"}, device)')
            .multi(True)
            .include_all(True)
        )
    )
    n = 0
    for title, unit, queries in panels:
        dash = dash.with_panel(series(title, unit, *queries, n=n))
        n += 1
    dash = dash.with_panel(
        heatmap.Panel()
        .id(n + 1)
        .title("observed loss by link (receiver <- sender)")
        .datasource(DS)
        .unit("percentunit")
        .calculate(False)
        .grid_pos(GridPos(h=H, w=2 * W, x=0, y=((n + 1) // 2) * H))
        .with_target(q(f"{S['link_loss']}{{{SEL}}}", "{{device}} <- {{peer}}").ref_id("A"))
    )
    return json.loads(JSONEncoder(sort_keys=True).encode(dash.build()))


def main(out: str) -> None:
    with open(out, "w") as f:
        json.dump(build(), f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
