"""One exception root: every error class edgegossip defines derives from EdgegossipError, and the
CLI turns any of them into one line and the error's exit code."""

import ast
import importlib
from pathlib import Path

import click
from click.testing import CliRunner

from edgegossip import exit_codes
from edgegossip.errors import EdgegossipError, UsageError

PACKAGE = Path(__file__).resolve().parents[1] / "edgegossip"
CONTROL_FLOW = {"Stopped"}  # protocol/base.py: a blocking step gave up because the agent stops


def _error_classes():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, (ast.Name, ast.Attribute))
                and (getattr(b, "id", "") or getattr(b, "attr", "")).endswith(
                    ("Error", "Exception")
                )
                for b in node.bases
            ):
                mod = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                yield mod, node.name


def test_every_error_class_has_the_one_root():
    found = [(m, n) for m, n in _error_classes() if n not in CONTROL_FLOW]
    assert len(found) >= 20
    strays = [
        f"{m}.{n}"
        for m, n in found
        if not issubclass(getattr(importlib.import_module(m), n), EdgegossipError)
    ]
    assert strays == []


def test_the_cli_renders_any_of_them_as_one_line_with_its_exit_code():
    from edgegossip.cli.app import cli

    @cli.command("boom-test")
    @click.option("--usage", is_flag=True)
    def boom(usage):
        raise (UsageError if usage else EdgegossipError)("it broke\nsecond line")

    try:
        for flag, code in ((["--usage"], exit_codes.USAGE), ([], exit_codes.FAILURE)):
            res = CliRunner().invoke(cli, ["boom-test", *flag])
            assert res.exit_code == code and res.output == "edgegossip: error: it broke\n"
    finally:
        cli.commands.pop("boom-test")
