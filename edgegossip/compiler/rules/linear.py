"""Gemm and MatMul (rules of compiler/ops.py)."""

from __future__ import annotations

from edgegossip.compiler.emit import Emit
from edgegossip.compiler.errors import CompileError
from edgegossip.compiler.table import Grads, attr


def gemm_vjp(e, n, g, s):
    """y = alpha A' B' + beta C, A' = A or A^T (transA), B' = B or B^T (transB):
    gA' = alpha g B'^T, gB' = alpha A'^T g (transposed back where the input was),
    gC = beta g (summed back to C's shape by the driver)."""
    a, b = n.input[0], n.input[1]
    ta, tb = attr(n, "transA", 0), attr(n, "transB", 0)
    alpha, beta = attr(n, "alpha", 1.0), attr(n, "beta", 1.0)
    k = {} if alpha == 1.0 else {"alpha": alpha}
    if not ta:
        ga = e.op("Gemm", g[0], b, transB=0 if tb else 1, **k)
    else:
        ga = e.op("Gemm", b, g[0], transA=1 if tb else 0, transB=1, **k)
    if not tb:
        gb = e.op("Gemm", a, g[0], transA=0 if ta else 1, **k)
    else:
        gb = e.op("Gemm", g[0], a, transA=1, transB=1 if ta else 0, **k)
    out: Grads = [ga, gb]
    if len(n.input) > 2 and n.input[2]:
        out.append(g[0] if beta == 1.0 else e.op("Mul", g[0], e.const(beta)))
    return out


def _swap_last(e: Emit, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return e.op("Transpose", x, perm=perm)


def matmul_vjp(e, n, g, s):
    """y = A B (A [..., M, K], B [K, N] or batched like A):  gA = g B^T;
    gB = A^T g summed over A's batch dims (as [-1, K]^T [-1, N] for a 2-D B; a batched B's
    is summed back over the dims it was broadcast on)."""
    a, b = n.input
    ra, rb = len(e.shape(a) or []), len(e.shape(b) or [])
    if ra < 2 or rb < 2:
        raise CompileError(f"node {n.name or n.output[0]}: MatMul of a vector is not supported")
    ga = e.op("MatMul", g[0], _swap_last(e, b, rb))
    if rb == 2:
        k, m = e.static(b, "MatMul's gradient")
        a2 = e.op("Reshape", a, e.const([-1, k]))
        g2 = e.op("Reshape", g[0], e.const([-1, m]))
        gb = e.op("Gemm", a2, g2, transA=1)
    else:
        gb = e.unbroadcast(e.op("MatMul", _swap_last(e, a, ra), g[0]), b, n.output[0])
    return [ga, gb]
