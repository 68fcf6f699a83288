"""Hosts and groups from an Ansible inventory, INI or YAML: ansible_host, ansible_user and
ansible_port per host (or from a group's vars). Every host becomes one device of the fleet."""

from __future__ import annotations

from pathlib import Path

from edgegossip.fleet.inventory import InventoryError


def _host(hosts: dict, name: str, group: str | None, vars_: dict) -> None:
    h = hosts.setdefault(
        name, {"name": name, "address": name, "user": "root", "port": 22, "groups": []}
    )
    if group and group not in ("all", "ungrouped") and group not in h["groups"]:
        h["groups"].append(group)
    if "ansible_host" in vars_:
        h["address"] = str(vars_["ansible_host"])
    if "ansible_user" in vars_:
        h["user"] = str(vars_["ansible_user"])
    if "ansible_port" in vars_:
        try:
            h["port"] = int(vars_["ansible_port"])
        except (TypeError, ValueError):
            raise InventoryError(
                f"{name}: ansible_port {vars_['ansible_port']!r} is not a number"
            ) from None


def from_ini(text: str, source: str) -> list[dict]:
    hosts: dict = {}
    group_vars: dict = {}
    members: dict = {}
    section, kind = None, "hosts"
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise InventoryError(f"{source}:{n}: unterminated section {line!r}")
            section, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            continue
        words = line.split()
        if kind == "vars":
            k, sep, v = line.partition("=")
            if not sep:
                raise InventoryError(f"{source}:{n}: expected KEY=VALUE in [{section}:vars]")
            group_vars.setdefault(section, {})[k.strip()] = v.strip()
        elif kind == "children":
            members.setdefault(words[0], []).append(section)
        else:
            vars_ = {}
            for w in words[1:]:
                k, sep, v = w.partition("=")
                if not sep:
                    raise InventoryError(f"{source}:{n}: expected KEY=VALUE, got {w!r}")
                vars_[k] = v
            _host(hosts, words[0], section, vars_)
    for h in hosts.values():  # group vars, then children's parents as groups too
        for g in list(h["groups"]):
            for parent in members.get(g, []):
                if parent not in h["groups"]:
                    h["groups"].append(parent)
        for g in h["groups"]:
            for k, v in group_vars.get(g, {}).items():
                if k in ("ansible_user", "ansible_port") and (
                    k != "ansible_user" or h["user"] == "root"
                ):
                    _host(hosts, h["name"], None, {k: v})
    return list(hosts.values())


def from_yaml(text: str, source: str) -> list[dict]:
    try:
        import yaml
    except ImportError:
        raise InventoryError(
            f"{source}: reading a YAML inventory needs PyYAML "
            "(pip install pyyaml), or give the INI form"
        ) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InventoryError(f"{source}: not valid YAML ({str(e).splitlines()[0]})") from None
    hosts: dict = {}

    def walk(group: str, body, inherited: dict, parents: list[str]) -> None:
        if body is None:
            return
        if not isinstance(body, dict):
            raise InventoryError(f"{source}: group {group!r} must be a mapping")
        vars_ = {**inherited, **(body.get("vars") or {})}
        for name, hv in (body.get("hosts") or {}).items():
            for g in [*parents, group]:
                _host(hosts, str(name), g, {**vars_, **(hv or {})})
        for child, cbody in (body.get("children") or {}).items():
            walk(str(child), cbody, vars_, [*parents, group])

    if not isinstance(doc, dict):
        raise InventoryError(f"{source}: not an Ansible inventory")
    for group, body in doc.items():
        walk(str(group), body, {}, [])
    return list(hosts.values())


def load(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except OSError as e:
        raise InventoryError(f"{path}: {e.strerror}") from None
    yaml_like = path.suffix in (".yml", ".yaml") or text.lstrip().startswith(("all:", "---"))
    hosts = from_yaml(text, str(path)) if yaml_like else from_ini(text, str(path))
    if not hosts:
        raise InventoryError(f"{path}: no hosts in it")
    return hosts
