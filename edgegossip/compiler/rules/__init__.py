"""The vector-Jacobian products of the op table (compiler/ops.py), by kind of op: the math in
each function's docstring."""
