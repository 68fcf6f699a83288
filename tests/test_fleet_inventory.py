"""The fleet inventory without devices: validation with one-line errors, Ansible import, device
selection, `fleet set` parsing, rollout batches, rendering each device's agent config."""

import json
import stat
import subprocess
import sys

import pytest

from edgegossip import config
from edgegossip.fleet import agentconf, ansible, create, inventory, settings
from edgegossip.fleet.deploy import batches, rollout
from edgegossip.fleet.inventory import InventoryError


def _fleet(tmp_path, n=3, **train):
    hosts = [
        {
            "name": f"pi{i}",
            "address": f"192.0.2.{i + 1}",
            "user": "pi",
            "groups": ["a" if i else "b"],
        }
        for i in range(n)
    ]
    return create.create(
        tmp_path / "f",
        "test",
        hosts,
        {"train": {"model": "logreg", **train}},
        progress=lambda m: None,
    )


def _edit(tmp_path, old, new):
    p = tmp_path / "f" / "fleet.toml"
    p.write_text(p.read_text().replace(old, new, 1))
    return p


def test_init_writes_inventory_and_private_secrets(tmp_path):
    f = _fleet(tmp_path)
    again = inventory.load(tmp_path / "f")
    assert [d.id for d in again.devices] == [0, 1, 2] and again.id == f.id
    s = tmp_path / "f" / "secrets"
    assert stat.S_IMODE(s.stat().st_mode) == 0o700
    for name in ("master.key", "ssh/id_ed25519", "control/client.key_secret"):
        assert stat.S_IMODE((s / name).stat().st_mode) == 0o600, name
    text = (tmp_path / "f" / "fleet.toml").read_text()
    assert (s / "master.key").read_text().strip() not in text  # secrets never in the inventory
    with pytest.raises(InventoryError, match="a fleet is there already"):
        _fleet(tmp_path)


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("id = 1\n", "id = 0\n", "devices.pi1.id: duplicate agent id 0"),
        ("[train]\n", "[train]\nbogus = 1\n", "train.bogus: unknown key"),
        (
            "[train]\n",
            '[train]\nkeys = "x"\n',
            "train.keys: unknown key (set by the fleet tooling)",
        ),
        ('user = "pi"\n', 'user = "pi"\ncolour = "red"\n', "devices[0].colour: unknown key"),
        ('address = "192.0.2.2"', 'address = "192.0.2.1"', "192.0.2.1 is also pi0's address"),
        (
            'model = "logreg"',
            'model = "resnet"',
            "train.model: must be mlp, logreg, cnn or the folder of a compiled model",
        ),
        ('name = "pi2"', 'name = "pi 2"', "devices.pi 2.name"),
        ("port = 22\n", "port = 99999\n", "devices.pi0.port: must be a port number"),
        (
            "[train]\n",
            '[data]\nlabel_column = "y"\n[train]\n',
            "data.label_column given but data.source is 'mnist'",
        ),
        (
            "[train]\n",
            "[train]\nrps_period = 4\n",
            "train.rps_period given but train.algorithm is 'elastic-gossip'",
        ),
    ],
)
def test_bad_inventory_is_one_line_naming_the_key(tmp_path, old, new, message):
    _fleet(tmp_path)
    _edit(tmp_path, old, new)
    with pytest.raises(InventoryError) as e:
        inventory.load(tmp_path / "f")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_inventory_from_the_cli_is_one_line_and_exit_2(tmp_path):
    _fleet(tmp_path)
    _edit(tmp_path, "id = 1\n", "id = 0\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgegossip.cli.app",
            "fleet",
            "status",
            "--fleet",
            str(tmp_path / "f"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "duplicate agent id" in p.stderr


def test_ids_stay_stable_when_devices_come_and_go(tmp_path):
    f = _fleet(tmp_path)
    from dataclasses import replace

    f = replace(f, devices=f.devices[:1] + f.devices[2:])  # pi1 (id 1) retired
    f = replace(f, devices=(*f.devices, inventory.Device("pi9", "192.0.2.9", inventory.next_id(f))))
    inventory.save(f)
    f = inventory.load(tmp_path / "f")
    assert [(d.name, d.id) for d in f.devices] == [("pi0", 0), ("pi2", 2), ("pi9", 3)]
    cfg = agentconf.render(f, f.device("pi9"))
    assert cfg.workers == 4 and sorted(p.id for p in cfg.peers) == [0, 2]
    # rps needs every id: a gap is a one-line error
    with pytest.raises(InventoryError, match="rps needs agent ids 0..2 without gaps"):
        inventory.validate(f.with_settings({"train": {"algorithm": "rps", "model": "logreg"}}))


def test_rendered_config_layers_profile_fleet_and_overrides(tmp_path):
    f = _fleet(tmp_path)
    from dataclasses import replace

    pi = replace(f.devices[0], profile="raspberry-pi-zero-2w", overrides={"batch": 16})
    f = replace(f, devices=(pi, *f.devices[1:]))
    cfg = agentconf.render(f, pi)
    assert cfg.rate_mbps == 5 and cfg.batch == 16  # profile, then the device's override
    assert cfg.model == "logreg"  # the profile cannot change the fleet's model
    assert cfg.keys == agentconf.KEYFILE and cfg.endpoint.endswith(":47100") and cfg.fleet == f.id
    assert config.from_dict(__import__("tomllib").loads(agentconf.toml(f, pi))) == cfg
    with pytest.raises(InventoryError, match="overrides.model: must be the same on every device"):
        inventory._device({"name": "x", "address": "h", "id": 5, "overrides": {"model": "mlp"}}, 0)


def test_select_by_name_and_group(tmp_path):
    f = _fleet(tmp_path)
    assert [d.name for d in f.select("a")] == ["pi1", "pi2"]
    assert [d.name for d in f.select("pi0,a")] == ["pi0", "pi1", "pi2"]
    with pytest.raises(InventoryError, match="neither a device nor a group"):
        f.select("nope")


def test_ansible_ini_and_yaml(tmp_path):
    ini = """
[pis]
kitchen ansible_host=192.0.2.10 ansible_user=pi
garage  ansible_host=192.0.2.11 ansible_port=2222

[pis:vars]
ansible_user=ops

[house:children]
pis
"""
    hosts = ansible.from_ini(ini, "inv")
    by = {h["name"]: h for h in hosts}
    assert by["kitchen"]["address"] == "192.0.2.10" and by["kitchen"]["user"] == "pi"
    assert by["garage"]["port"] == 2222 and by["garage"]["user"] == "ops"
    assert set(by["garage"]["groups"]) == {"pis", "house"}
    yaml = pytest.importorskip("yaml")
    doc = {
        "all": {
            "children": {
                "pis": {
                    "vars": {"ansible_user": "pi"},
                    "hosts": {
                        "a1": {"ansible_host": "192.0.2.20"},
                        "a2": {"ansible_host": "192.0.2.21", "ansible_port": 22},
                    },
                }
            }
        }
    }
    hosts = ansible.from_yaml(yaml.safe_dump(doc), "inv.yml")
    assert [(h["name"], h["address"], h["user"], "pis" in h["groups"]) for h in hosts] == [
        ("a1", "192.0.2.20", "pi", True),
        ("a2", "192.0.2.21", "pi", True),
    ]
    with pytest.raises(InventoryError, match="expected KEY=VALUE"):
        ansible.from_ini("[g]\nhost oops\n", "inv")


_TRICKY_INI = """
[all:vars]
ansible_user=base
ansible_port=2200

[pis]
pi[03:04] ansible_port=2222
kitchen ansible_host=192.0.2.10 ansible_user=pi  # the host's own user beats every group's
garage  ansible_host="192.0.2.11"
node[a:c]
x[1:7:3]

[pis:vars]
ansible_user=ops
ansible_port=2300

[house:children]
pis

[house:vars]
ansible_user=houseuser
ansible_port=2400

[zz]
garage ansible_port=2500
[aa]
garage
[aa:vars]
ansible_user=aauser
[zz:vars]
ansible_user=zzuser
"""

_TRICKY_YAML = """
all:
  vars: {ansible_user: base}
  children:
    site:
      vars: {ansible_port: 2000, ansible_user: siteuser}
      children:
        rack:
          vars: {ansible_port: 3000}
          hosts:
            r[01:02]:
            special: {ansible_port: 4000, ansible_host: 192.0.2.40}
    other:
      vars: {ansible_user: otheruser, ansible_group_priority: 5}
      hosts:
        special:
        lone: {ansible_host: 192.0.2.41}
"""


@pytest.mark.parametrize("name,text", [("hosts.ini", _TRICKY_INI), ("hosts.yml", _TRICKY_YAML)])
def test_ansible_reader_agrees_with_ansible(tmp_path, name, text):
    """Our reader, used where Ansible is not installed, gives what ansible-inventory gives:
    precedence by depth, priority and name with the host's own variables last, and ranges."""
    exe = ansible.ansible_inventory()
    assert exe, "ansible-core is in the test extra"
    path = tmp_path / name
    path.write_text(text)
    theirs = {h["name"]: h for h in ansible.load(path)}
    ours = {h["name"]: h for h in ansible.load(path, use_ansible=False)}
    assert ours == theirs
    if name == "hosts.ini":
        assert sorted(ours) == sorted(
            ["pi03", "pi04", "kitchen", "garage", "nodea", "nodeb", "nodec", "x1", "x4", "x7"]
        )
        # a host's own port beats its group's, the deeper group beats the shallower ones
        assert (ours["pi03"]["port"], ours["pi03"]["user"]) == (2222, "ops")
        assert (ours["garage"]["port"], ours["garage"]["user"]) == (2500, "ops")
    else:
        assert ours["special"]["port"] == 4000 and ours["r01"]["port"] == 3000


def test_ansible_ranges_refused_when_malformed():
    assert ansible.expand("pi[08:10]") == ["pi08", "pi09", "pi10"]
    assert ansible.expand("a[1:2]b[x:y]") == ["a1bx", "a1by", "a2bx", "a2by"]
    for bad in ("pi[1:", "pi[1]", "pi[01:100]", "pi[3:1]", "pi[a:3]", "pi[1:4:0]"):
        with pytest.raises(InventoryError):
            ansible.expand(bad)


def test_cli_init_from_ansible(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text("[pis]\nk ansible_host=192.0.2.10\ng ansible_host=192.0.2.11\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgegossip.cli.app",
            "fleet",
            "init",
            str(tmp_path / "f"),
            "--from-ansible",
            str(inv),
            "--model",
            "logreg",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [(d["name"], d["address"], d["id"]) for d in out["devices"]] == [
        ("k", "192.0.2.10", 0),
        ("g", "192.0.2.11", 1),
    ]


def test_set_parses_against_the_config_types(tmp_path):
    f = _fleet(tmp_path)
    assert settings.parse("p=1/16") == ("train", "p", 0.0625)
    assert settings.parse("net.rate_mbps=10") == ("net", "rate_mbps", 10.0)
    assert settings.parse("encrypt=true") == ("net", "encrypt", True)
    for bad, msg in [
        ("p", "expected KEY=VALUE"),
        ("batch=big", "is not a int"),
        ("keys=/x", "not a setting"),
        ("train.rate_mbps=3", "not a setting"),
    ]:
        with pytest.raises(InventoryError, match=msg):
            settings.parse(bad)
    new = settings.apply(f, [settings.parse("p=1/16")], None)
    assert all(agentconf.render(new, d).p == 0.0625 for d in new.devices)
    with pytest.raises(InventoryError, match="train.p: must be in"):
        settings.apply(f, [settings.parse("p=2")], None)
    with pytest.raises(InventoryError, match="same on every device"):
        settings.apply(f, [settings.parse("p=0.5")], [f.devices[0]])
    one = settings.apply(f, [settings.parse("batch=8")], [f.devices[0]])
    assert (
        agentconf.render(one, one.devices[0]).batch == 8
        and agentconf.render(one, one.devices[1]).batch == 32
    )


def test_rollout_batches_and_max_fail():
    class D:
        def __init__(self, name):
            self.name = name

    ds = [D(f"d{i}") for i in range(5)]
    assert [len(b) for b in batches(ds, "2")] == [2, 2, 1]
    assert [len(b) for b in batches(ds, "40%")] == [2, 2, 1]
    seen = []

    def run(group):
        seen.extend(d.name for d in group)
        return [{"name": d.name, "ok": d.name != "d0"} for d in group]

    rows = rollout(ds, "2", "0", run)
    assert seen == ["d0", "d1"] and [r.get("skipped") for r in rows[2:]] == [True, True, True]
    seen.clear()
    rows = rollout(ds, "1", "20%", run)  # one failure is allowed: 1 <= 5 * 20%
    assert seen == [d.name for d in ds] and sum(not r["ok"] for r in rows) == 1


def test_metrics_port_reaches_every_agent_and_the_file_sd_list(tmp_path):
    from dataclasses import replace

    from click.testing import CliRunner

    from edgegossip.cli.app import cli

    f = _fleet(tmp_path)
    f = replace(f, control_from=("192.0.2.200",))
    inventory.save(f)
    cfg = agentconf.render(f, f.devices[1])
    assert cfg.metrics_endpoint == "0.0.0.0:47200" and cfg.metrics_allow_from == "192.0.2.200"
    out = tmp_path / "sd.json"
    res = CliRunner().invoke(
        cli, ["fleet", "prometheus", "--fleet", str(f.root), "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text()) == [
        {
            "targets": [f"192.0.2.{i + 1}:47200"],
            "labels": {"device": f"pi{i}", "group": g, "fleet": "test"},
        }
        for i, g in enumerate("baa")
    ]
    # a fleet without /metrics says so, and nothing is written
    _edit(tmp_path, "metrics_port = 47200", "metrics_port = 0")
    out.unlink()
    res = CliRunner().invoke(
        cli, ["fleet", "prometheus", "--fleet", str(f.root), "--out", str(out)]
    )
    assert res.exit_code == 2 and "metrics_port is 0" in res.output and not out.exists()
    off = inventory.load(f.root)
    assert agentconf.render(off, off.devices[0]).metrics_endpoint == ""
    _edit(tmp_path, "metrics_port = 0", "metrics_port = 47100")
    with pytest.raises(InventoryError, match="ports must differ"):
        inventory.load(f.root)
