"""Commands in-process with click's CliRunner: --json shapes and one-line errors."""

import json

import click
from click.testing import CliRunner

from edgegossip.cli.app import cli
from edgegossip.dataplane import wire


def _json(args):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output.strip().splitlines()[-1])


def test_bench_kernels_json():
    out = _json(["bench", "kernels", "--json", "--size", "20000", "--repeat", "1"])
    names = {r["kernel"] for r in out["results"]}
    assert "elastic_pull" in names
    for r in out["results"]:
        assert {"kernel", "n", "native_gbps", "numpy_gbps", "copy_gbps"} <= set(r)
        assert r["native_gbps"] > 0 and r["copy_gbps"] > 0


def test_bench_shard_json(mnist_data):
    out = _json(["bench", "shard", "--json"])
    plain, packed = out["results"]
    assert (plain["rows"], packed["rows"]) == ("plain", "packed")
    assert plain["examples"] == packed["examples"] == 12_800 + 2_000
    # the packed shard is the smaller one by construction (MNIST deflates about 3.7x); times
    # are reported, not judged
    assert packed["mb"] < plain["mb"] / 3
    assert all(r["batch_us"] > 0 and r["mlp_step_ms"] > 0 for r in out["results"])


def test_bench_transport_json():
    out = _json(
        [
            "bench",
            "transport",
            "--json",
            "--transport",
            "raw",
            "--transport",
            "udp",
            "--datagrams",
            "3000",
            "--repeats",
            "1",
        ]
    )
    rows = out["results"]
    assert {r["transport"] for r in rows} == {"raw", "udp"}
    assert {r["chunk_bytes"] for r in rows} == {wire.default_chunk_bytes(), wire.max_chunk_bytes()}
    for r in rows:
        assert {"transport", "chunk_bytes", "goodput_mbps", "datagrams_per_s", "delivered"} <= set(
            r
        )
        if r["transport"] == "udp":
            assert r["delivered"] >= 0.999


def test_simulate_json_and_determinism(mnist_data):
    args = [
        "simulate",
        "--algorithm",
        "elastic-gossip",
        "--model",
        "logreg",
        "--p",
        "1/2",
        "--loss",
        "0.3",
        "--epochs",
        "0.2",
        "--seed",
        "5",
        "--json",
    ]
    a, b = _json(args), _json(args)
    for key in (
        "algorithm",
        "workers",
        "loss",
        "epochs",
        "acc_worker0",
        "acc_average",
        "bytes_sent_per_worker",
    ):
        assert key in a
    assert a["acc_worker0"] == b["acc_worker0"] and a["datagrams_lost"] == b["datagrams_lost"]
    assert 0.25 < a["datagrams_lost"] / a["datagrams_sent"] < 0.35
    assert a["acc_average"] > 0.8


def test_simulate_every_algorithm_learns(mnist_data):
    for alg in ("elastic-gossip", "gossip-pull", "gossip-push", "rps", "allreduce", "local"):
        out = _json(
            [
                "simulate",
                "--algorithm",
                alg,
                "--model",
                "logreg",
                "--p",
                "1/4",
                "--loss",
                "0.1",
                "--epochs",
                "0.1",
                "--json",
            ]
        )
        assert out["acc_worker0"] > 0.7, (alg, out)  # chance is 0.1
        if alg == "gossip-push":  # push-sum: no weight is made or lost, even at 10% loss
            assert out["push_weight_sum"] == 4.0, out
    eg = _json(
        [
            "simulate",
            "--algorithm",
            "elastic-gossip",
            "--model",
            "logreg",
            "--p",
            "1/32",
            "--epochs",
            "0.2",
            "--json",
        ]
    )
    ar = _json(
        ["simulate", "--algorithm", "allreduce", "--model", "logreg", "--epochs", "0.2", "--json"]
    )
    # expected ratio 1.5 / (2p) = 24 at p=1/32; 80 steps of random picks leave it noisy
    assert ar["bytes_sent_per_worker"] > 12 * eg["bytes_sent_per_worker"]


def test_errors_are_one_line():
    runner = CliRunner()
    res = runner.invoke(cli, ["simulate", "--algorithm", "elastic-gossip", "--p", "3/2"])
    assert res.exit_code == 2 and "3/2: must be in [0, 1]" in res.output
    res = runner.invoke(cli, ["emulate", "--nodes", "2"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    res = runner.invoke(cli, ["simulate", "--algorithm", "gossip-pull", "--workers", "1"])
    assert res.exit_code == 2 and "at least 2" in res.output


def test_emulate_without_root_says_so(monkeypatch, mnist_data):
    from edgegossip.emulate import netns

    monkeypatch.setattr(netns, "is_root", lambda: False)
    res = CliRunner().invoke(cli, ["emulate", "--backend", "netns", "--duration", "1"])
    assert res.exit_code == 3
    assert "--backend loopback" in res.output and res.output.strip().count("\n") == 0


def test_simulate_history_rows_match_shorter_runs(mnist_data, tmp_path):
    """A row checkpointed at epoch E of a longer run is the row a run of E epochs gives (the
    learning rate is constant), so a long run cut short still yields a table."""
    base = [
        "simulate",
        "--algorithm",
        "elastic-gossip",
        "--model",
        "logreg",
        "--p",
        "1/4",
        "--loss",
        "0.1",
        "--seed",
        "3",
        "--json",
    ]
    hist = tmp_path / "h.jsonl"
    final = _json([*base, "--epochs", "0.2", "--eval-every", "0.1", "--history", str(hist)])
    rows = [json.loads(line) for line in hist.read_text().splitlines()]
    assert [r["epochs"] for r in rows] == [0.1, 0.2] and rows[-1] == final
    short = _json([*base, "--epochs", "0.1"])
    for key in ("steps", "acc_worker0", "acc_average", "bytes_sent_per_worker", "datagrams_lost"):
        assert rows[0][key] == short[key], key
    res = CliRunner().invoke(cli, [*base, "--epochs", "0.1", "--eval-every", "0.1"])
    assert res.exit_code == 2 and "needs --history or --plot" in res.output


def test_simulate_plot_draws_png_and_svg(tmp_path):
    from matplotlib.image import imread

    stem = tmp_path / "plots" / "acc"
    res = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--algorithm",
            "elastic-gossip",
            "--model",
            "logreg",
            "--epochs",
            "0.5",
            "--eval-every",
            "0.1",
            "--plot",
            str(stem),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    plots = json.loads(res.output.strip().splitlines()[-1])["plots"]
    assert sorted(p.rsplit(".", 1)[1] for p in plots) == ["png", "png", "svg", "svg"]
    for p in plots:
        if p.endswith(".png"):
            assert imread(p).shape[:2] == (420, 750)  # 7.5 x 4.2 inches at 100 dpi
        else:
            assert "<svg" in open(p).read()
    res = CliRunner().invoke(cli, ["simulate", "--algorithm", "local", "--plot", str(stem)])
    assert res.exit_code == 2 and "need --eval-every" in res.output


def test_lab_boot_refuses_what_it_cannot_boot(tmp_path):
    """No lab in the folder, or a card folder with no cmdline.txt: one line and a non-zero exit,
    before any device is touched."""
    card = tmp_path / "card"
    card.mkdir()
    res = CliRunner().invoke(cli, ["lab", "boot", str(tmp_path), "lab1-0", "--card", str(card)])
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "no lab there" in res.output
    (tmp_path / "lab.json").write_text(json.dumps({"lab": 1, "root": "/x", "devices": []}))
    res = CliRunner().invoke(cli, ["lab", "boot", str(tmp_path), "lab1-0", "--card", str(card)])
    assert res.exit_code == 2 and "not a device of the lab" in res.output, res.output


def test_every_tool_that_runs_a_fleet_offers_a_runs_settings_by_their_names():
    """Issue 57, item 1: offering an agent setting on every tool that runs a fleet is its name
    in run.RUN_SETTINGS: emulate, simulate (those it models), bench overhead (all but its
    variants' payload and its own model choice) and lab up each have its option, with
    config.py's default and choices, and simulate reads it as its agents would."""
    from edgegossip import config
    from edgegossip.cli.bench import OVERHEAD_SETTINGS
    from edgegossip.run import LAB, RUN_SETTINGS, SIMULATED

    for path, names in (
        (["emulate"], set(RUN_SETTINGS)),
        (["simulate"], SIMULATED),
        (["bench", "overhead"], OVERHEAD_SETTINGS),
        (["lab", "up"], LAB),
    ):
        cmd = cli
        for word in path:
            cmd = cmd.get_command(click.Context(cmd), word)
        params = {p.name: p for p in cmd.params}
        for name in names:
            want = "logreg" if (path, name) == (["lab", "up"], "model") else config.default(name)
            assert params[name].default == want, (path, name)
            if name in config.CHOICES:
                assert list(params[name].type.choices) == list(config.CHOICES[name])
    ctx = cli.get_command(click.Context(cli), "simulate").make_context(
        "simulate", ["--algorithm", "rps", "--beta", "0.2", "--partition", "dirichlet"]
    )
    assert {ctx.params["beta"], ctx.params["partition"]} == {0.2, "dirichlet"}
