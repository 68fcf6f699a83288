"""`edgegossip exchange`: two peer processes swap a model over lossy UDP (data-plane demo)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import click

from edgegossip import exit_codes
from edgegossip.cli import options
from edgegossip.cli.render import fail, table


def _spawn(prefix: list[str], args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        prefix + [sys.executable, "-m", "edgegossip.bench.exchange_peer", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_pair(
    backend: str, transport: str, loss: float, params: int, rounds: int, rate_mbps: float
) -> dict:
    from edgegossip.emulate import netns

    lan = None
    procs: list[subprocess.Popen] = []
    try:
        if backend == "netns":
            lan = netns.Lan(2, loss=loss).up()
            addrs = [f"{lan.address(i)}:47000" for i in range(2)]
            prefixes = [lan.exec_args(i) for i in range(2)]
            inject = 0.0
        else:
            addrs = ["127.0.0.1:47010", "127.0.0.1:47011"]
            prefixes = [[], []]
            inject = loss
        for i in range(2):
            peer = [i, addrs[i], addrs[1 - i], transport, params, rounds, 0.5, inject]
            procs.append(_spawn(prefixes[i], [*map(str, peer), str(rate_mbps * 1e6), "3.0"]))
        outs = [p.communicate(timeout=60 + rounds * 10) for p in procs]
        for p, (_, err) in zip(procs, outs):
            if p.returncode != 0:
                raise RuntimeError(f"peer exited with {p.returncode}: {err.strip()[-400:]}")
        kernel_drops = [lan.dropped_packets(i) for i in range(2)] if lan else None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if lan is not None:
            lan.down()
    return _result(outs, backend, transport, loss, kernel_drops)


def _result(outs: list, backend: str, transport: str, loss: float, kernel_drops) -> dict:
    """The peers' JSON lines as one result."""
    lines = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.strip()]
    rounds_rows = [r for r in lines if "round" in r]
    finals = {r["peer"]: r for r in lines if r.get("final")}
    arrived = sum(f["link_arrived"] for f in finals.values())
    expected = sum(f["link_expected"] for f in finals.values())
    return {
        "transport": transport,
        "backend": backend,
        "loss_kind": "kernel (nftables)" if backend == "netns" else "injected",
        "configured_loss": loss,
        "observed_loss": round(1 - arrived / expected, 4) if expected else None,
        "kernel_dropped_packets": kernel_drops,
        "rounds": rounds_rows,
        "peers": [finals[k] for k in sorted(finals)],
    }


@click.command()
@click.option(
    "--transport", type=options.choice("transport", ("both",)), default="both", show_default=True
)
@click.option(
    "--loss",
    type=click.FloatRange(0, 1),
    default=0.1,
    show_default=True,
    help="Fraction of packets the network drops.",
)
@click.option(
    "--params",
    type=click.IntRange(1, 50_000_000),
    default=2_913_290,
    show_default=True,
    help="Model size in float32 parameters.",
)
@click.option("--rounds", type=click.IntRange(1, 1000), default=4, show_default=True)
@click.option(
    "--rate",
    "rate_mbps",
    type=float,
    default=40.0,
    show_default=True,
    help="Send pacing per peer, MB/s.",
)
@options.network_backend("netns: real kernel loss (root); loopback: injected loss.")
@click.option("--json", "as_json", is_flag=True)
def exchange(transport, loss, params, rounds, rate_mbps, backend, as_json) -> None:
    """Two processes exchange a model for a few rounds; what arrived is merged by mask."""
    from edgegossip.emulate.netns import EmulationError

    backend = options.resolve_network_backend(backend)
    results = []
    for name in ["udp", "zmq"] if transport == "both" else [transport]:
        t0 = time.monotonic()
        try:
            res = _run_pair(backend, name, loss, params, rounds, rate_mbps)
        except (EmulationError, RuntimeError, subprocess.TimeoutExpired) as e:
            fail(f"{name} exchange failed: {e}", exit_codes.FAILURE)
        res["elapsed_s"] = round(time.monotonic() - t0, 2)
        results.append(res)
        if not as_json:
            click.echo(
                f"\n{name}: {params} float32 per model, {loss:.0%} loss "
                f"({res['loss_kind']}), observed {res['observed_loss']:.1%} of datagrams lost"
            )
            rows = [
                {
                    "round": r["round"],
                    "peer": r["peer"],
                    "arrived": f"{r['arrived']}/{r['chunks']}",
                    "mean after merge": r["mean"],
                }
                for r in res["rounds"]
            ]
            click.echo(table(rows, ["round", "peer", "arrived", "mean after merge"]))
            click.echo(
                table(
                    [
                        {k: p.get(k) for k in ("peer", "datagrams_sent", "accepted", "dropped")}
                        | {"drops": p["drops"]}
                        for p in res["peers"]
                    ],
                    ["peer", "datagrams_sent", "accepted", "dropped", "drops"],
                )
            )
    if as_json:
        click.echo(json.dumps({"results": results}))
