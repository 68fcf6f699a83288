import pytest

from edgegossip import config
from edgegossip.config import ConfigError

BASE = {
    "agent": {
        "id": 0,
        "listen": "127.0.0.1:9000",
        "peers": ["1@127.0.0.1:9001", "2@127.0.0.1:9002", "3@127.0.0.1:9003"],
    }
}


def _with(section, key, value):
    doc = {k: dict(v) for k, v in BASE.items()}
    doc.setdefault(section, {})[key] = value
    return doc


def test_defaults_and_roundtrip(tmp_path):
    c = config.from_dict(BASE)
    assert c.algorithm == "elastic-gossip" and c.peers[2].port == 9003
    path = tmp_path / "a.toml"
    path.write_text(config.to_toml(c))
    assert config.load(path) == c


@pytest.mark.parametrize(
    "doc,needle",
    [
        (_with("train", "lrr", 0.1), "train.lrr: unknown key"),
        (_with("train", "algorithm", "sgd"), "train.algorithm"),
        (_with("train", "lr", "fast"), "train.lr: expected float"),
        (_with("net", "chunk_bytes", 9000), "net.chunk_bytes"),
        (_with("net", "transport", "tcp"), "net.transport"),
        (_with("agent", "listen", "nowhere"), "agent.listen"),
        (_with("agent", "peers", ["x@1.2.3.4:5"]), "agent.peers"),
        (_with("agent", "id", 7), "agent.id"),
        (_with("train", "p", 2.0), "train.p"),
        (_with("train", "phase", "end"), "train.phase"),
        (_with("train", "closing_s", 5.0), "train.closing_s: is the end of train.duration_s"),
        (
            {
                "agent": {"id": 0, "listen": "127.0.0.1:1"},
                "train": {"algorithm": "local", "phase": "closing"},
            },
            "train.phase: local has no exchanges to close with",
        ),
        ({"agent": {"listen": "127.0.0.1:1"}}, "agent.id: missing"),
        ({"bogus": {}}, "bogus: unknown section"),
    ],
)
def test_bad_config_names_the_key(doc, needle):
    with pytest.raises(ConfigError) as e:
        config.from_dict(doc)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_config_is_one_line(tmp_path):
    from click.testing import CliRunner

    from edgegossip.cli.app import cli

    p = tmp_path / "a.toml"
    p.write_text("[train]\nlrr = 1\n")
    res = CliRunner().invoke(cli, ["agent", "--config", str(p)])
    assert res.exit_code == 2
    assert res.output.strip().count("\n") == 0 and "train.lrr: unknown key" in res.output
    res = CliRunner().invoke(cli, ["agent", "--config", str(tmp_path / "missing.toml")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    p.write_text("not = [toml")
    res = CliRunner().invoke(cli, ["agent", "--config", str(p)])
    assert res.exit_code == 2 and "not valid TOML" in res.output


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"data": {"path": "device-0.npz"}}, "data.path given but data.source is 'mnist'"),
        ({"data": {"label_column": "y"}}, "data.label_column given but data.source is 'mnist'"),
        (
            {"data": {"source": "file", "path": "d.npz"}, "train": {"partition": "dirichlet"}},
            "train.partition given but data.source is 'file'",
        ),
        (
            {"train": {"algorithm": "rps", "alpha": 0.3}},
            "train.alpha given but train.algorithm is 'rps'",
        ),
        (
            {"train": {"algorithm": "local", "p": 0.5}},
            "train.p given but train.algorithm is 'local'",
        ),
        (
            {"train": {"rps_period": 4}},
            "train.rps_period given but train.algorithm is 'elastic-gossip'",
        ),
        ({"net": {"deadline_max_s": 30.0}}, "net.deadline_max_s given but net.deadline is 'fixed'"),
        ({"net": {"transport": "zmq", "gso": False}}, "net.gso given but net.transport is 'zmq'"),
        (
            {"agent": {"key": "k" * 32, "keys": "links.keys"}},
            "agent.key given but agent.keys is set",
        ),
    ],
)
def test_a_key_without_effect_is_refused_naming_both_keys(extra, needle):
    doc = {k: dict(v) for k, v in BASE.items()}
    for section, body in extra.items():
        doc.setdefault(section, {}).update(body)
    with pytest.raises(ConfigError) as e:
        config.from_dict(doc)
    assert needle in str(e.value)


def test_keys_that_act_are_accepted_and_written_back(tmp_path):
    doc = {k: dict(v) for k, v in BASE.items()}
    doc["data"] = {"source": "file", "path": "device-0.npz", "label_column": "y"}
    doc["train"] = {"algorithm": "rps", "rps_period": 4}
    doc["net"] = {"deadline": "adaptive", "deadline_max_s": 30.0}
    c = config.from_dict(doc)
    path = tmp_path / "a.toml"
    path.write_text(config.to_toml(c))  # what to_toml writes must load again: no idle keys
    assert config.load(path) == c


def test_a_config_built_in_code_is_validated_as_one_read_from_a_file():
    with pytest.raises(
        ConfigError, match="train.model: must be mlp, logreg, cnn or the folder of a compiled model"
    ):
        config.AgentConfig(id=0, listen="127.0.0.1:9000", model="resnet")
    with pytest.raises(ConfigError, match="agent.id: must be in 0..3"):
        config.AgentConfig(id=7, listen="127.0.0.1:9000", algorithm="local")
