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
    x = np.array([10, 10, 10, 10], np.float32)  # post-step
    pre = np.array([1, 2, 3, 4], np.float32)  # pre-step parameters
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
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 4, 13, 3)  # runs past the end
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 4, -4, 0)  # negative offset
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 4, 0, 4)  # chunk index past mask
    assert not impl.scatter_chunk(buf, mask, b"\x09" * 20, 0, 0)  # longer than buffer
    assert buf[:12].tolist() == [0] * 12 and mask.tolist() == [0, 0, 0, 1]
    assert impl.scatter_chunk(buf, mask, b"", 16, 0)  # empty payload at the end


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

    out = subprocess.run(
        [sys.executable, "-c", "import edgegossip.kernels as k; print(k.IMPLEMENTATION)"],
        env={**__import__("os").environ, "EDGEGOSSIP_NO_EXTENSIONS": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
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


def _awkward_floats(n, rng):
    """Parameters as they are, plus every edge a codec must get right: zeros of both signs,
    float16's subnormals and the ties between them, its largest value and beyond, bfloat16
    ties, and values far outside float16's range."""
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(0.05)
    edges = np.array(
        [
            0.0,
            -0.0,
            2.0**-24,
            2.0**-25,
            3 * 2.0**-25,
            2.0**-14,
            2.0**-14 - 2.0**-25,
            6.1e-5,
            65504.0,
            65519.0,
            65520.0,
            1e6,
            -1e6,
            1e-30,
            1.0 + 2.0**-11,
            1.0 + 3 * 2.0**-11,
            1.0 + 2.0**-8,
            1.0 + 3 * 2.0**-8,
            3e38,
            -3e38,
        ],
        np.float32,
    )
    x[: min(n, len(edges))] = edges[:n]
    tiny = rng.integers(-(2**10), 2**10, n).astype(np.float32) * np.float32(2.0**-25)
    x[len(edges) :] += tiny[len(edges) :]  # odd multiples of 2^-25 hit float16 subnormal ties
    return x


@pytest.mark.parametrize("n", [0, 1, 20, 353, 100_003])
@pytest.mark.parametrize("codec", ["f16", "bf16"])
def test_half_codecs_match_reference_bit_for_bit(impl, n, codec):
    x = _awkward_floats(n, np.random.default_rng(n))
    got, want = np.zeros(2 * n, np.uint8), np.zeros(2 * n, np.uint8)
    getattr(impl, f"{codec}_encode")(x, got)
    getattr(ref, f"{codec}_encode")(x, want)
    np.testing.assert_array_equal(got, want)
    back, back_ref = np.empty(n, np.float32), np.empty(n, np.float32)
    getattr(impl, f"{codec}_decode")(got, back)
    getattr(ref, f"{codec}_decode")(want, back_ref)
    np.testing.assert_array_equal(back.view(np.uint32), back_ref.view(np.uint32))


def test_f16_is_numpys_float16_and_saturates():
    x = _awkward_floats(5000, np.random.default_rng(1))
    out = np.zeros(2 * len(x), np.uint8)
    ref.f16_encode(x, out)
    want = np.clip(x, -65504, 65504).astype(np.float16)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
    assert np.isfinite(out.view(np.float16)).all()


def test_bf16_rounds_to_nearest_even():
    x = np.array([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-9, -2.5], np.float32)
    out, back = np.zeros(8, np.uint8), np.empty(4, np.float32)
    ref.bf16_encode(x, out)
    ref.bf16_decode(out, back)
    np.testing.assert_array_equal(back, [1.0, 1.0 + 2.0**-6, 1.0, -2.5])  # ties go to even


@pytest.mark.parametrize("n", [0, 1, 20, 353, 100_003])
@pytest.mark.parametrize("chunk", [1, 7, 351, 1400])
def test_i8_codec_matches_reference_bit_for_bit(impl, n, chunk):
    rng = np.random.default_rng(n + chunk)
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(0.05)
    if n > 30:
        x[10 : 10 + chunk] = 0.0  # an all-zero chunk: scale 0
        x[25] = np.nan  # a chunk that must arrive as non-finite
    size = n + 4 * (-(-n // chunk))
    got, want = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    impl.i8_encode(x, got, chunk)
    ref.i8_encode(x, want, chunk)
    np.testing.assert_array_equal(got, want)
    back, back_ref = np.empty(n, np.float32), np.empty(n, np.float32)
    impl.i8_decode(got, back, chunk)
    ref.i8_decode(want, back_ref, chunk)
    np.testing.assert_array_equal(back.view(np.uint32), back_ref.view(np.uint32))


@pytest.mark.parametrize(
    "x",
    [
        [0.5, -2.0, 1.0, 0.0],  # the largest magnitude is negative
        [-0.0, 0.0, -0.0, 0.0],  # scale 0
        [1e-45, -1e-44, 0.0, 1e-44],  # subnormals only: their scale rounds to 0
        [3e-39, -1e-38, 1e-37, 0.0],  # a scale below the smallest normal: zeros, scale 0
        [3.4028235e38, -3.4028235e38, 1.0, -1.0],  # the largest finite floats
        [np.inf, 1.0, 2.0, 3.0],
        [1.0, -np.inf, 2.0, 3.0],
        [1.0, 2.0, np.nan, 3.0],
        [1.0, 2.0, 3.0, -np.nan],
    ],
)
def test_i8_scale_of_special_values_matches_reference(impl, x):
    # the compiled encoder takes max|x| on the float's bits: the same scale for every kind of
    # value, NaN and Inf among them (a NaN scale), as NumPy's abs().max()
    x = np.array(x, np.float32)
    got, want = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
    impl.i8_encode(x, got, 4)
    ref.i8_encode(x, want, 4)
    np.testing.assert_array_equal(got[4:], want[4:])
    assert got[:4].view("<u4")[0] == want[:4].view("<u4")[0] or (
        np.isnan(got[:4].view("<f4")[0]) and np.isnan(want[:4].view("<f4")[0])
    )


@pytest.mark.parametrize("baseline", [False, True])
def test_both_compiled_i8_encoders_match_the_reference_on_ties_and_clamps(baseline):
    # the compiled encoder has a portable build and, on x86-64, an AVX2 one (native/_i8.h); the
    # CPU picks one, so each is run by name here. Chunk 0 has scale 1 exactly (max 127), so its
    # halves are rounding ties (to even); chunk 1's scale makes x * (1 / scale) land a hair
    # beyond -127 for its largest magnitude (-0.6 gives -127.00001), which the clamp takes back.
    k = pytest.importorskip("edgegossip._kernels_c")
    ties = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -126.5, 127.0, -127.0, 0.0, 3.5]
    rng = np.random.default_rng(11)
    rand = rng.standard_normal(4000, dtype=np.float32) * np.float32(3e-3)
    x = np.concatenate([np.array(ties, np.float32), np.float32(0.1) * np.arange(-6, 6), rand])
    x = x.astype(np.float32)
    chunk = 12
    size = len(x) + 4 * (-(-len(x) // chunk))
    got, want = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    k.i8_encode(x, got, chunk, baseline)
    ref.i8_encode(x, want, chunk)
    np.testing.assert_array_equal(got, want)
    assert list(got[4:16].view(np.int8)) == [0, 2, 2, 0, -2, -2, 126, -126, 127, -127, 0, 4]


def test_i8_a_scale_below_the_smallest_normal_travels_as_zeros(impl):
    # 1 / scale would overflow to Inf, and Inf * 0 to NaN: a conversion to int8 C leaves undefined
    x = np.array([3e-39, -1e-38, 1e-37, 0.0], np.float32)
    out, back = np.full(8, 7, np.uint8), np.empty(4, np.float32)
    impl.i8_encode(x, out, 4)
    assert not out.any()
    impl.i8_decode(out, back, 4)
    assert not back.any()


def test_i8_error_is_at_most_half_a_step_of_its_chunk():
    x = np.array([0.5, -0.25, 0.1, 0.0, 1e-4, 2.0, -2.0, 0.7], np.float32)
    out, back = np.zeros(8 + 8, np.uint8), np.empty(8, np.float32)
    ref.i8_encode(x, out, 4)
    ref.i8_decode(out, back, 4)
    for c, amax in ((0, 0.5), (1, 2.0)):
        step = amax / 127
        assert np.abs(back[4 * c : 4 * c + 4] - x[4 * c : 4 * c + 4]).max() <= step / 2 * 1.0001
    assert back[0] == 0.5 and back[5] == 2.0 and back[6] == -2.0  # the largest is exact


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("kind", ["zeros", "ones", "random"])
def test_chunk_distances_and_scale_toward_match_reference(impl, n, chunk, kind):
    """The merge bound's kernels (protocol/bound.py): each chunk's squared distance, in float64
    (sums over a chunk in another order: rtol 1e-9), and a move toward ref by a chunk's factor,
    elementwise in float32 (rtol 1e-6)."""
    rng = np.random.default_rng(n * 7 + chunk)
    y = rng.standard_normal(n, dtype=np.float32)
    x = rng.standard_normal(n, dtype=np.float32)
    mask = _mask(n, chunk, kind, rng)
    m = -(-n // chunk)
    got = np.full(m, -1.0)
    impl.chunk_distances(y, x, mask, chunk, got)
    sel = np.repeat(mask.astype(bool), chunk)[:n]
    d = (y.astype(np.float64) - x) * sel
    expect = np.bincount(np.arange(n) // chunk, weights=d * d, minlength=m)
    np.testing.assert_allclose(got, expect, rtol=1e-9, atol=1e-12)
    scale = rng.random(m).astype(np.float32)
    scale[::3] = 1.0
    out = y.copy()
    impl.scale_toward(out, x, mask, scale, chunk)
    k = np.where(sel, np.repeat(scale, chunk)[:n], 1.0)
    np.testing.assert_allclose(out, x + k * (y - x), rtol=1e-6, atol=1e-6)
