"""Hosts and groups from an Ansible inventory. Every host becomes one device of the fleet, with
its ansible_host, ansible_user and ansible_port and the groups it belongs to.

When `ansible-inventory` is installed it reads the file, so whatever Ansible accepts works here
(plugins and scripts included) and means what it means to Ansible. Without it, our own reader
takes the INI and YAML forms by the rules Ansible documents for them:

- host ranges: `pi[01:04]` is pi01..pi04 (a leading zero fixes the width), `node[a:c]` letters,
  `x[1:9:4]` a stride;
- variables by precedence, lowest first: `all`, then the groups by depth (a parent before its
  child), groups of one depth by `ansible_group_priority` and then by name, and last the host's
  own variables, which beat every group's;
- in INI, variables on a host's line are Python literals and those in `[group:vars]` strings.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from edgegossip.fleet.inventory import InventoryError

_SPECIAL = ("all", "ungrouped")


@dataclass
class _Inventory:
    """What an inventory says, before precedence: each host's own variables (in the order the
    file names them), each group's variables and each host's and group's direct parents."""

    host_vars: dict[str, dict] = field(default_factory=dict)
    group_vars: dict[str, dict] = field(default_factory=dict)
    host_parents: dict[str, list[str]] = field(default_factory=dict)
    group_parents: dict[str, list[str]] = field(default_factory=dict)

    def add_host(self, name: str, group: str | None, vars_: dict) -> None:
        self.host_vars.setdefault(name, {}).update(vars_)
        parents = self.host_parents.setdefault(name, [])
        if group and group not in parents:
            parents.append(group)
        if group:
            self.add_group(group)

    def add_group(self, name: str, parent: str | None = None, vars_: dict | None = None) -> None:
        parents = self.group_parents.setdefault(name, [])
        if parent and parent != name and parent not in parents:
            parents.append(parent)
            self.add_group(parent)
        self.group_vars.setdefault(name, {}).update(vars_ or {})

    def ancestors(self, direct: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(direct)
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                todo.extend(self.group_parents.get(g, []))
        return seen

    def depth(self, group: str, _path: tuple = ()) -> int:
        if group == "all":
            return 0
        if group in _path:
            raise InventoryError(f"group {group!r} is its own ancestor")
        parents = [p for p in self.group_parents.get(group, []) if p != "all"]
        return 1 + max((self.depth(p, (*_path, group)) for p in parents), default=0)

    def hosts(self) -> list[dict]:
        out = []
        for name, own in self.host_vars.items():
            groups = self.ancestors(self.host_parents.get(name, [])) - {"all"}

            def order(g: str) -> tuple:
                priority = self.group_vars.get(g, {}).get("ansible_group_priority", 1)
                return (self.depth(g), _int(priority, g, "ansible_group_priority"), g)

            merged: dict = dict(self.group_vars.get("all", {}))
            for g in sorted(groups, key=order):
                merged.update(self.group_vars.get(g, {}))
            merged.update(own)
            shown = sorted(groups - set(_SPECIAL), key=lambda g: (self.depth(g), g))
            out.append(_device(name, merged, shown))
        return out


def _int(value, host: str, key: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InventoryError(f"{host}: {key} {value!r} is not a number") from None


def _device(name: str, vars_: dict, groups: list[str]) -> dict:
    return {
        "name": name,
        "address": str(vars_.get("ansible_host", name)),
        "user": str(vars_.get("ansible_user", "root")),
        "port": _int(vars_.get("ansible_port", 22), name, "ansible_port"),
        "groups": groups,
    }


def expand(pattern: str, where: str = "") -> list[str]:
    """A host pattern's names: `pi[01:03]` is pi01, pi02, pi03; several ranges multiply."""
    if "[" not in pattern:
        return [pattern]
    head, _, rest = pattern.partition("[")
    body, sep, tail = rest.partition("]")
    if not sep:
        raise InventoryError(f"{where}host pattern {pattern!r} has an unclosed '['")
    parts = body.split(":")
    if len(parts) not in (2, 3):
        raise InventoryError(f"{where}host range [{body}] is not [start:end] or [start:end:step]")
    beg, end = parts[0] or "0", parts[1]
    step = _int(parts[2], pattern, "range step") if len(parts) == 3 else 1
    if step < 1:
        raise InventoryError(f"{where}host range [{body}] needs a positive step")
    if beg.isdigit() and end.isdigit():
        width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
        if width and len(end) != width:
            raise InventoryError(f"{where}host range [{body}]: start and end differ in width")
        names = [str(i).zfill(width) for i in range(int(beg), int(end) + 1, step)]
    elif len(beg) == 1 and len(end) == 1 and beg in string.ascii_letters:
        letters = string.ascii_letters
        if end not in letters or letters.index(end) < letters.index(beg):
            raise InventoryError(f"{where}host range [{body}] is not a range of letters")
        names = list(letters[letters.index(beg) : letters.index(end) + 1 : step])
    else:
        raise InventoryError(f"{where}host range [{body}] is neither numbers nor letters")
    if not names:
        raise InventoryError(f"{where}host range [{body}] is empty")
    return [head + n + t for n in names for t in expand(tail, where)]


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def from_ini(text: str, source: str) -> list[dict]:
    inv = _Inventory()
    section, kind = "ungrouped", "hosts"
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        where = f"{source}:{n}: "
        if line.startswith("["):
            if not line.endswith("]"):
                raise InventoryError(f"{where}unterminated section {line!r}")
            section, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise InventoryError(f"{where}unknown section kind {kind!r}")
            inv.add_group(section)
            continue
        if kind == "vars":
            k, sep, v = line.partition("=")
            if not sep:
                raise InventoryError(f"{where}expected KEY=VALUE in [{section}:vars]")
            inv.add_group(section, vars_={k.strip(): v.strip()})
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise InventoryError(f"{where}{e}") from None
        if not words:
            continue
        if kind == "children":
            inv.add_group(words[0], parent=section)
            continue
        vars_ = {}
        for w in words[1:]:
            k, sep, v = w.partition("=")
            if not sep:
                raise InventoryError(f"{where}expected KEY=VALUE, got {w!r}")
            vars_[k] = _literal(v)
        for name in expand(words[0], where):
            inv.add_host(name, section, vars_)
    return inv.hosts()


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
    inv = _Inventory()

    def walk(group: str, body, parent: str | None) -> None:
        if body is not None and not isinstance(body, dict):
            raise InventoryError(f"{source}: group {group!r} must be a mapping")
        body = body or {}
        vars_ = body.get("vars") or {}
        if not isinstance(vars_, dict):
            raise InventoryError(f"{source}: vars of group {group!r} must be a mapping")
        inv.add_group(group, parent=parent, vars_=vars_)
        for pattern, hv in (body.get("hosts") or {}).items():
            if hv is not None and not isinstance(hv, dict):
                raise InventoryError(f"{source}: host {pattern!r} must map to its variables")
            for name in expand(str(pattern), f"{source}: "):
                inv.add_host(name, group, hv or {})
        for child, cbody in (body.get("children") or {}).items():
            walk(str(child), cbody, group)

    if not isinstance(doc, dict):
        raise InventoryError(f"{source}: not an Ansible inventory")
    for group, body in doc.items():
        walk(str(group), body, None)
    return inv.hosts()


def ansible_inventory() -> str | None:
    """The `ansible-inventory` command, on PATH or beside this Python (a virtualenv's bin)."""
    beside = Path(sys.executable).parent / "ansible-inventory"
    return shutil.which("ansible-inventory") or (str(beside) if beside.exists() else None)


def from_ansible(path: Path, exe: str) -> list[dict]:
    """The hosts as Ansible itself reads them: `ansible-inventory --list` has every host's
    variables merged by Ansible's precedence, and each group's direct hosts and children."""
    with tempfile.TemporaryDirectory(prefix="edgegossip-ansible-") as tmp:
        env = {**os.environ, "ANSIBLE_LOCAL_TEMP": tmp, "ANSIBLE_NOCOLOR": "1"}
        env.setdefault("ANSIBLE_HOME", tmp)
        try:
            p = subprocess.run(
                [exe, "-i", str(path), "--list"],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise InventoryError(f"{path}: ansible-inventory failed ({e})") from None
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()] or ["no output"]
        raise InventoryError(f"{path}: ansible-inventory: {lines[-1].strip()}")
    try:
        doc = json.loads(p.stdout)
        hostvars = doc.get("_meta", {}).get("hostvars", {})
    except (ValueError, AttributeError):
        raise InventoryError(f"{path}: ansible-inventory gave no inventory") from None
    inv = _Inventory()
    for group, body in doc.items():
        if group == "_meta" or not isinstance(body, dict):
            continue
        inv.add_group(group)
        for child in body.get("children", []):
            inv.add_group(child, parent=group)
        for host in body.get("hosts", []):
            inv.add_host(host, group, {})
    for host, vars_ in hostvars.items():
        inv.add_host(host, None, vars_)
    # Ansible has merged every host's variables already, so only its own count here
    inv.group_vars = {}
    return inv.hosts()


def load(path: Path, use_ansible: bool = True) -> list[dict]:
    try:
        text = path.read_text()
    except OSError as e:
        raise InventoryError(f"{path}: {e.strerror}") from None
    exe = ansible_inventory() if use_ansible else None
    if exe:
        hosts = from_ansible(path, exe)
    elif path.suffix in (".yml", ".yaml") or text.lstrip().startswith(("all:", "---")):
        hosts = from_yaml(text, str(path))
    else:
        hosts = from_ini(text, str(path))
    if not hosts:
        raise InventoryError(f"{path}: no hosts in it")
    return hosts
