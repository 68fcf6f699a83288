import numpy as np
import pytest

from edgegossip import _kernels_py as ref

SIZES = [0, 1, 7, 353, 1000, 100_003]
CHUNKS = [1, 3, 353]


def _mask(n, chunk, kind, rng):
    m = -(-n // chunk)
    if kind == "zeros":
        return np.zeros(m, np.uint8)
    if kind == "ones":
        return np.ones(m, np.uint8)
    return (rng.random(m) < 0.6).astype(np.uint8)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("kind", ["zeros", "ones", "random"])
def test_elastic_pull_matches_reference(impl, n, chunk, kind):
    rng = np.random.default_rng(n + chunk)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    mask = _mask(n, chunk, kind, rng)
    expect = x.copy()
    sel = np.repeat(mask.astype(bool), chunk)[:n]
    expect[sel] -= np.float32(0.5) * (x[sel] - y[sel])
    impl.elastic_pull(x, x, y, mask, chunk, 0.5)
    np.testing.assert_allclose(x, expect, rtol=1e-6, atol=1e-6)


def test_elastic_pull_with_separate_reference(impl):
    x = np.array([10, 10, 10, 10], np.float32)   # post-step
    pre = np.array([1, 2, 3, 4], np.float32)     # pre-step parameters
    y = np.array([3, 2, 1, 0], np.float32)
    impl.elastic_pull(x, pre, y, np.array([1, 0], np.uint8), 2, 0.5)
    np.testing.assert_array_equal(x, [11, 10, 10, 10])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_accumulate_average_match_reference(impl, n, chunk):
    rng = np.random.default_rng(1)
    m = -(-n // chunk)
    x = rng.standard_normal(n, dtype=np.float32)
    outs = []
    for k in (impl, ref):
        acc = x.copy()
        count = np.ones(m, np.int32)
        for _ in range(3):
            y = rng.standard_normal(n, dtype=np.float32)
            mask = _mask(n, chunk, "random", rng)
            k.masked_accumulate(acc, count, y, mask, chunk)
        out = np.full(n, 7, np.float32)
        k.masked_average(out, acc, count, chunk)
        outs.append((acc, count, out))
        rng = np.random.default_rng(1)
        rng.standard_normal(n, dtype=np.float32)
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-6)
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    np.testing.assert_allclose(outs[0][2], outs[1][2], rtol=1e-6)


def test_average_divides_by_arrivals_and_keeps_the_rest(impl):
    acc = np.array([6, 6, 5, 5], np.float32)
    count = np.array([3, 0], np.int32)
    x = np.array([9, 9, 9, 9], np.float32)
    impl.masked_average(x, acc, count, 2)
    np.testing.assert_array_equal(x, [2, 2, 9, 9])


@pytest.mark.parametrize("kind", ["zeros", "ones", "random"])
def test_masked_copy(impl, kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1001, dtype=np.float32)
    y = rng.standard_normal(1001, dtype=np.float32)
    mask = _mask(1001, 10, kind, rng)
    expect = x.copy()
    ref.masked_copy(expect, y, mask, 10)
    impl.masked_copy(x, y, mask, 10)
    np.testing.assert_array_equal(x, expect)


def test_scatter_chunk_bounds(impl):
    buf = np.zeros(16, np.uint8)
    mask = np.zeros(4, np.uint8)
    assert impl.scatter_chunk(buf, mask, b"\x01\x02\x03\x04", 12, 3)
    assert buf[12:].tolist() == [1, 2, 3, 4] and mask.tolist() == [0, 0, 0, 1]
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 4, 13, 3)   # runs past the end
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 4, -4, 0)   # negative offset
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 4, 0, 4)    # chunk index past mask
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 20, 0, 0)   # longer than buffer
    assert buf[:12].tolist() == [0] * 12 and mask.tolist() == [0, 0, 0, 1]
    assert impl.scatter_chunk(buf, mask, b"", 16, 0)               # empty payload at the end


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite(impl, bad):
    a = np.arange(1001, dtype=np.float32)
    assert impl.all_finite(a.tobytes())
    a[777] = bad
    assert not impl.all_finite(a.tobytes())
    assert impl.all_finite(b"")
    with pytest.raises(ValueError):
        impl.all_finite(b"\x00\x00\x00")


def test_all_finite_unaligned(impl):
    raw = b"\x00" + np.array([1.0, np.nan], np.float32).tobytes()
    assert not impl.all_finite(memoryview(raw)[1:])
    raw = b"\x00" + np.array([1.0, 2.0], np.float32).tobytes()
    assert impl.all_finite(memoryview(raw)[1:])


def test_shape_errors(impl):
    x = np.zeros(10, np.float32)
    with pytest.raises(ValueError):
        impl.elastic_pull(x, x, np.zeros(9, np.float32), np.ones(10, np.uint8), 1, 0.5)
    with pytest.raises(ValueError):
        impl.elastic_pull(x, x, x.copy(), np.ones(2, np.uint8), 1, 0.5)
    with pytest.raises(ValueError):
        impl.masked_copy(x, x.copy(), np.ones(10, np.uint8), 0)


def test_selector_env(monkeypatch):
    import importlib
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import edgegossip.kernels as k; print(k.IMPLEMENTATION)"],
                         env={**__import__("os").environ, "EDGEGOSSIP_NO_EXTENSIONS": "1"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "numpy"
    assert importlib.import_module("edgegossip.kernels").IMPLEMENTATION in ("cython", "numpy")


@pytest.mark.parametrize("n", SIZES)
def test_nesterov_step_matches_pytorch_formula(impl, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n, dtype=np.float32)
    v = rng.standard_normal(n, dtype=np.float32)
    g = rng.standard_normal(n, dtype=np.float32)
    v_exp = 0.99 * v.astype(np.float64) + g
    x_exp = x - 0.001 * (g + 0.99 * v_exp)
    impl.nesterov_step(x, v, g, 0.001, 0.99)
    np.testing.assert_allclose(v, v_exp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x, x_exp, rtol=1e-5, atol=1e-6)
