"""What `model compile` refuses: one error, one line, naming the node and the op."""

from __future__ import annotations

from edgegossip.errors import UsageError


class CompileError(UsageError, ValueError):
    """The model cannot be compiled for training (an op outside the table, a shape that must be
    known, an input that is not what the loss needs); exit 2, nothing written."""
