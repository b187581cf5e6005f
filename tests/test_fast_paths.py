"""Fast paths against their references, bit for bit: float32 rounding vs the ml_dtypes / NumPy casts.

Inputs are every value of each format, the midpoints between neighbours (the ties) and
the float32 numbers just either side of them, subnormals, ±0, ±inf, NaN, values near and
beyond the largest finite one, and scaled random blocks.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from vfasim.functional import quant
from vfasim.functional.precision import Precision, round_float16
from vfasim.functional.quant import FORMATS, MXFP4, NVFP4, Scaling, quantize, quantize_values, round_nearest_even

FAST = [name for name in FORMATS if name != "bfloat16"]  # bfloat16's range is float32's: reference path
SCALINGS = {"none": Scaling("none"), "per_tensor": Scaling("per_tensor"), "mxfp4": MXFP4, "nvfp4": NVFP4,
            "mx": Scaling("per_block", 32, "e8m0")}


def bits32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def format_values(name: str) -> np.ndarray:
    """Every finite value of the format, as float32, sorted, -0 and +0 both kept."""
    dt, nbytes = FORMATS[name], FORMATS[name].itemsize
    codes = np.arange(2 ** (8 * nbytes), dtype=np.uint16 if nbytes == 2 else np.uint8)
    if name == "float4_e2m1":
        codes = codes[:16]
    values = codes.view(dt) if name != "float4_e2m1" else codes.astype(np.uint8).view(dt)
    f = values.astype(np.float32)
    return np.sort(f[np.isfinite(f)])


def probe(name: str) -> np.ndarray:
    """Values of the format, their midpoints, a float32 step either side of each, and specials."""
    v = np.unique(format_values(name))
    mid = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    top = np.float32(quant.max_finite(name))
    with np.errstate(over="ignore"):
        beyond = np.array([top * 1.0625, top * 1.5, top * 4, 1e30, 3e38], np.float32)
    pts = np.concatenate([v, mid, beyond, -beyond, [0.0, -0.0, 1e-45, -1e-45, 1e-39, -1e-39]]).astype(np.float32)
    around = np.concatenate([np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))])
    return np.concatenate([pts, around]).astype(np.float32)


def cast(x: np.ndarray, name: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(FORMATS[name]).astype(np.float32)


@pytest.mark.parametrize("name", FAST)
def test_grid_rounding_is_the_cast_within_range(name):
    x = probe(name)
    top = np.float32(quant.max_finite(name))
    got, want = round_nearest_even(x, *quant.grid(name)), cast(x, name)
    beyond = quant.overflow_mask(x, name)  # the caller decides these: inf, NaN or saturation
    inside = np.isfinite(x) & ~beyond
    assert inside.sum() > 100 and beyond.sum() > 4
    np.testing.assert_array_equal(bits32(got)[inside], bits32(want)[inside])
    assert np.all(np.abs(got[beyond]) > top)  # overflow stays recognisable as overflow


def test_round_float16_is_numpys_cast_on_edges_and_specials():
    x = np.concatenate([probe("float16"), np.array([np.inf, -np.inf, np.nan, -np.nan, 65519.99, 65520, -65520,
                                                    65504, -65504], np.float32)])
    nan_payload = np.array([0x7FC00001, 0xFFC02000, 0x7F800001, 0x7FA00000], np.uint32).view(np.float32)
    x = np.concatenate([x, nan_payload, np.zeros(0, np.float32)])
    np.testing.assert_array_equal(bits32(round_float16(x)), bits32(cast(x, "float16")))
    assert bits32(round_float16(np.float32(-0.0))) == bits32(np.float32(-0.0))  # a 0-d input works too


@pytest.mark.parametrize("name", ["float16", *FAST])
def test_rounding_an_array_without_sign_bits_skips_nothing_it_needs(name):
    """No negative value and no -0: the sign pass is skipped, and the bits are still the cast's."""
    x = probe(name)
    x = x[(x.view(np.int32) >= 0) & np.isfinite(x)]
    if name == "float16":
        got = round_float16(x)
    else:
        x = x[~quant.overflow_mask(x, name)]
        got = round_nearest_even(x, *quant.grid(name))
    assert x.size > 50 and np.all(x.view(np.int32) >= 0)
    np.testing.assert_array_equal(bits32(got), bits32(cast(x, name)))


@pytest.mark.parametrize("name", ["float16", *FAST])
def test_rounding_in_place_is_the_cast(name):
    """``out`` is ``x``: the same bits as a new array, the values past fp16's range taken from the cast first."""
    x = probe(name)
    if name == "float16":
        x = np.concatenate([x, np.array([np.inf, -np.inf, np.nan, 65519.99, 65520], np.float32),
                            np.array([0x7FC00001, 0x7F800001], np.uint32).view(np.float32)])
        want, got = round_float16(x), x.copy()
        assert round_float16(got, out=got) is got
        assert np.array_equal(bits32(round_float16(x[x > 0].copy(), out=np.empty(int((x > 0).sum()), np.float32))),
                              bits32(cast(x[x > 0], name)))
    else:
        x = x[np.isfinite(x) & ~quant.overflow_mask(x, name)]
        want, got = round_nearest_even(x, *quant.grid(name)), x.copy()
        assert round_nearest_even(got, *quant.grid(name), out=got) is got
    np.testing.assert_array_equal(bits32(got), bits32(want))
    np.testing.assert_array_equal(bits32(want), bits32(cast(x, name)))


@pytest.mark.parametrize("tiny", [-0.0, -2.0**-25, -2.0**-26, -1e-45, -(2.0**-25) * 1.0001, -1.0])
def test_a_negative_value_rounding_to_zero_keeps_its_sign(tiny):
    """x + C - C gives +0 for a negative value that rounds to zero: its sign is put back, and only where one is."""
    x = np.array([3.0, -2.5, tiny, 1e-30, -7.0], np.float32)
    np.testing.assert_array_equal(bits32(round_float16(x)), bits32(cast(x, "float16")))
    y = x.copy()
    np.testing.assert_array_equal(bits32(Precision(vector="float16").round_vector(y, out=y)),
                                  bits32(cast(x, "float16")))


def test_round_float16_on_random_data_of_every_magnitude():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(300_000) * np.exp2(rng.uniform(-150, 20, 300_000))).astype(np.float32)
    np.testing.assert_array_equal(bits32(round_float16(x)), bits32(cast(x, "float16")))


def assert_same_values(x: np.ndarray, name: str, scaling: Scaling, axis: int = -1) -> None:
    ref = quantize(x, name, scaling, axis=axis)
    values, over, under = quantize_values(x, name, scaling, axis=axis)
    nan = np.isnan(ref.values)
    np.testing.assert_array_equal(np.isnan(values), nan)
    np.testing.assert_array_equal(bits32(values)[~nan], bits32(ref.values)[~nan])
    assert (over, under) == (ref.overflow, ref.underflow)


@pytest.mark.parametrize("name", list(FORMATS))
def test_unscaled_values_and_counts_are_quantizes(name):
    x = probe(name)
    x = x[np.abs(x) < 3e38] if name == "bfloat16" else x  # bfloat16 rounds float32's max up past it
    assert_same_values(x, name, Scaling("none"))  # overflows: the reference path, except e2m1's saturation
    assert_same_values(x[~quant.overflow_mask(x, name)], name, Scaling("none"))
    assert_same_values(np.array([1.0, np.inf, -np.inf], np.float32), name, Scaling("none"))  # reference path


@pytest.mark.parametrize("name", FAST)
def test_in_range_inputs_take_the_fast_path(name, monkeypatch):
    x = probe(name)
    x = x[~quant.overflow_mask(x, name)]
    monkeypatch.setattr(quant, "quantize", None)  # any use of the reference would fail
    quantize_values(x, name, Scaling("none"))
    quantize_values(np.resize(x, (8, 64)), name, Scaling("per_block", 32, "e8m0"))


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("rule", list(SCALINGS))
@pytest.mark.parametrize("axis", [-1, -2])
def test_scaled_values_and_counts_are_quantizes(name, rule, axis):
    if rule == "nvfp4" and quant.max_finite(name) * 448 > float(np.finfo(np.float32).max):
        pytest.skip("NVFP4's two-level scale needs 448 * max within float32")
    rng = np.random.default_rng(11)
    x = probe(name)
    x = x[np.abs(x) <= 1e30][:4096]
    x = np.resize(x, (4, 32, 64)) * np.exp2(rng.integers(-20, 20, (4, 32, 1))).astype(np.float32)
    x[0, :, :32] = 0  # an all-zero block
    x[1, 3] = -0.0
    x[2, 5, :8] = 1e-42  # float32 subnormals
    assert_same_values(x, name, SCALINGS[rule], axis)


def test_mxfp4_on_attention_like_p_and_blocks_that_saturate():
    rng = np.random.default_rng(3)
    p = np.exp(np.minimum(rng.standard_normal((16, 64, 128)) * 4 - 6, 0)).astype(np.float32)
    for x in (p, (rng.integers(-28, 29, (16, 64, 128)) / 4).astype(np.float32)):  # e2m1 ties, and 7 = 8·7/8
        for axis in (-1, -2):
            assert_same_values(x, "float4_e2m1", MXFP4, axis)


def test_fast_paths_refuse_what_the_reference_refuses():
    with pytest.raises(Exception, match="NaN"):
        quantize_values(np.array([1.0, np.nan] * 16, np.float32), "float4_e2m1", MXFP4)
    for name in FORMATS:  # an unscaled cast passes NaN through, as the reference does
        assert_same_values(np.array([1.0, np.nan, -np.nan, 0.3] * 8, np.float32), name, Scaling("none"))
    with pytest.raises(Exception, match="inf"):
        quantize_values(np.array([1.0, np.inf] * 16, np.float32), "float4_e2m1", MXFP4)


def test_partial_blocks_use_the_reference():
    x = np.linspace(-3, 3, 40, dtype=np.float32)
    assert_same_values(x, "float4_e2m1", MXFP4)


@pytest.mark.parametrize("matmul, vector, scaling, block", [
    ("float16", "float32", "none", None), ("float8_e4m3", "float16", "per_tensor", None),
    ("float4_e2m1", "float16", "per_block", "mxfp4"), ("float4_e2m1", "float32", "per_block", "nvfp4")])
def test_precision_to_matmul_is_the_reference_quantiser(matmul, vector, scaling, block):
    rng = np.random.default_rng(2)
    prec = Precision(matmul=matmul, vector=vector, block_scale=block,
                     scaling={o: scaling for o in ("q", "k", "v", "p")})
    x = rng.standard_normal((3, 64, 64)).astype(np.float32) * 5
    values, over, under = prec.to_matmul(x, "q", -1)
    if scaling == "none":
        want = quantize(x, matmul, Scaling("none"))
    else:
        want = quantize(x, matmul, prec.rule("q"))
    np.testing.assert_array_equal(bits32(values), bits32(want.values))
    assert (over, under) == (want.overflow, want.underflow)
    assert ml_dtypes.finfo(FORMATS[matmul]).bits <= 16


@pytest.mark.parametrize("n, kv_len", [(300, 300), (70, 600), (600, 600)])
def test_oracle_reads_only_visible_keys_and_rows_on_request(n, kv_len):
    from vfasim.functional import reference_attention

    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, n, 16)).astype(np.float32)
    k, v = (rng.standard_normal((1, kv_len, 16)).astype(np.float32) for _ in range(2))
    s = np.einsum("hnd,kd->hnk", q.astype(np.float64), k[0].astype(np.float64)) / 4
    s[:, np.arange(kv_len)[None, :] > np.arange(n)[:, None] + (kv_len - n)] = -np.inf  # dense, masked
    p = np.exp(s - s.max(axis=2, keepdims=True))
    dense = p @ v[0].astype(np.float64) / p.sum(axis=2, keepdims=True)
    full = reference_attention(q, k, v, True)
    np.testing.assert_allclose(full, dense, rtol=1e-12, atol=1e-14)
    rows = np.array([0, 1, n // 2, n - 1])
    np.testing.assert_allclose(reference_attention(q, k, v, True, rows), full[:, rows], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("algo", ["fa2", "vfa", "blasst_rowskip"])
def test_step_batches_change_neither_numbers_nor_trace(algo, monkeypatch):
    from vfasim.functional import Tiling, run_engine
    from vfasim.functional import engine
    from vfasim.workloads import make_workload

    wl = make_workload("llm-like", 384, 32, 2, 0, 1)
    tiling = Tiling(384, 384, 32, 32, 32, True, 2, 1)
    prec = Precision(matmul="float4_e2m1", vector="float16", block_scale="mxfp4",
                     scaling={o: "per_block" for o in ("q", "k", "v", "p")})
    whole = run_engine(wl.q, wl.k, wl.v, tiling, algo, prec, lam=0.05)
    monkeypatch.setattr(engine, "STEP_BYTES", 3 * 32 * 32 * 4)  # three rows a batch
    batched = run_engine(wl.q, wl.k, wl.v, tiling, algo, prec, lam=0.05)
    assert batched.trace.digest() == whole.trace.digest()
    np.testing.assert_array_equal(batched.out.view(np.uint16), whole.out.view(np.uint16))
    assert batched.counts == whole.counts


def test_engine_rowmax_is_max_along_the_last_axis_nan_and_all():
    from vfasim.functional.arrays import rowmax as _rowmax

    x = np.random.default_rng(3).standard_normal((3, 4, 16)).astype(np.float32)
    x[0, 1, 5], x[1, 2, :] = np.inf, -np.inf
    np.testing.assert_array_equal(bits32(_rowmax(x)), bits32(x.max(axis=-1)))
    x[2, 3, 7] = np.nan  # fmax alone would skip it
    np.testing.assert_array_equal(bits32(_rowmax(x)), bits32(x.max(axis=-1)))


@pytest.mark.parametrize("special", [None, np.nan, np.inf, -np.inf, "overflowing squares", "empty"])
def test_all_finite_is_isfinite_all(special):
    from vfasim.functional.arrays import all_finite

    x = np.random.default_rng(5).standard_normal((3, 4, 16)).astype(np.float32)
    if special == "overflowing squares":  # every element finite, x · x is not
        x[:] = np.finfo(np.float32).max
    elif special == "empty":
        x = x[:0]
    elif special is not None:
        x[1, 2, 3] = special
    assert all_finite(x) == bool(np.isfinite(x).all())
    assert all_finite(x) is (special in (None, "overflowing squares", "empty"))


def test_engine_rescale_skips_only_tiles_whose_alpha_is_exactly_one():
    from vfasim.functional.arrays import rescaled as _rescaled

    vr = Precision(vector="float16").round_vector
    o = vr(np.random.default_rng(4).standard_normal((4, 3, 8)).astype(np.float32) * 100)
    o[0, 0, :3] = [-0.0, np.nan, np.inf]
    o[1] = o[0]
    alpha = np.ones((4, 3), np.float32)
    alpha[1, 2], alpha[2, 0], alpha[3, 1] = np.float32(0.5), np.nan, np.float32(np.nextafter(1, 0))
    want = vr(alpha[:, :, None] * o)
    np.testing.assert_array_equal(bits32(_rescaled(o.copy(), alpha, vr)), bits32(want))
