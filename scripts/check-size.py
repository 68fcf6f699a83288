"""The size limits of edgegossip's functions, which `make lint` keeps: no function longer than
MAX_LINES lines (its signature, docstring and body) and none with more than MAX_PARAMS
parameters (self and cls count; *args and **kwargs do not, so a click command takes its
options as **settings and hands them on). ruff checks the statements (PLR0915, 40)
and the parameters (PLR0913, 10) too; lines are not a ruff rule."""

import ast
import sys
from pathlib import Path

MAX_LINES = 60
MAX_PARAMS = 10


def oversized(root: Path):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]  # self and cls count too
            # from `def`: decorators (a command's click options) are declarations, not its body
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_LINES or len(params) > MAX_PARAMS:
                yield f"{path}:{node.lineno}: {node.name}: {lines} lines, {len(params)} parameters"


if __name__ == "__main__":
    found = list(oversized(Path(sys.argv[1] if len(sys.argv) > 1 else "edgegossip")))
    if found:
        print("\n".join(found))
        sys.exit(f"{len(found)} functions over {MAX_LINES} lines or {MAX_PARAMS} parameters")
