"""Quantisation of matmul inputs: casts bit-exact against ml_dtypes, MX/NVFP4 scales, counts."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vfasim.errors import VfasimError
from vfasim.functional.quant import (FORMATS, MXFP4, NVFP4, Scaling, cast_vector, check_block_divides,
                                     max_finite, quantize, quantize_values, to_float32)

NONE = Scaling("none")
E2M1_GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)

# From the formats' definitions: (max finite, min normal, min subnormal, mantissa bits, overflow goes to)
SPECS = {
    "float8_e4m3": (448.0, 2.0**-6, 2.0**-9, 3, "nan"),  # OCP FP8 E4M3 (fn): no inf, S.1111.111 is NaN
    "float8_e5m2": (57344.0, 2.0**-14, 2.0**-16, 2, "inf"),
    "float4_e2m1": (6.0, 1.0, 0.5, 1, "saturate"),  # no inf, no NaN: ml_dtypes saturates to ±6
    "float16": (65504.0, 2.0**-14, 2.0**-24, 10, "inf"),
    "bfloat16": ((2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133, 7, "inf"),
}
# Bit patterns of max finite, min normal, min subnormal, and +inf where the format has one
BITS = {
    "float8_e4m3": (0x7E, 0x08, 0x01, None),
    "float8_e5m2": (0x7B, 0x04, 0x01, 0x7C),
    "float4_e2m1": (0x7, 0x2, 0x1, None),
    "float16": (0x7BFF, 0x0400, 0x0001, 0x7C00),
    "bfloat16": (0x7F7F, 0x0080, 0x0001, 0x7F80),
}
UINT = {1: np.uint8, 2: np.uint16}
FLOAT32_MAX = float(np.finfo(np.float32).max)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(UINT[a.dtype.itemsize])


def edge_table(name: str) -> list[tuple[float, float]]:
    """(input, expected value) pairs written from the format's definition."""
    top, min_normal, min_sub, nmant, over = SPECS[name]
    top_ulp = 2.0 ** (np.frexp(top)[1] - 1 - nmant)
    ulp1 = 2.0**-nmant  # spacing just above 1
    beyond = {"nan": np.nan, "inf": np.inf, "saturate": top}[over]
    tie_at_top = top if name == "float8_e4m3" else beyond  # e4m3 max 1.110b·2^8 is even, the others odd
    rows = [
        (top, top), (-top, -top), (min_normal, min_normal), (min_sub, min_sub), (0.0, 0.0), (-0.0, -0.0),
        (top + top_ulp / 4, top),  # just above max: rounds back to max
        (top + top_ulp / 2, tie_at_top),  # the overflow tie
        (-(top + top_ulp / 2), -tie_at_top),
        (1 + ulp1 / 2, 1.0), (1 + 3 * ulp1 / 2, 1 + 2 * ulp1),  # ties to even, down then up
        (-(1 + ulp1 / 2), -1.0), (-(1 + 3 * ulp1 / 2), -(1 + 2 * ulp1)),
        (min_sub / 2, 0.0), (min_sub / 2 * (1 + 2.0**-10), min_sub),  # tie to zero vs just above it
        (3 * min_sub / 2, 2 * min_sub),
        (np.inf, np.inf if over == "inf" else beyond), (-np.inf, -np.inf if over == "inf" else -beyond),
    ]
    if name != "bfloat16":  # max + ulp is 2**128 for bfloat16: not a float32
        rows.append((top + top_ulp, beyond))
    if over != "saturate":
        rows.append((np.nan, np.nan))
    return rows


def table_arrays(name: str) -> tuple[np.ndarray, np.ndarray]:
    xs, expected = zip(*edge_table(name))
    x = np.array(xs, np.float32)
    assert np.array_equal(x.astype(np.float64), np.array(xs), equal_nan=True)  # the table is exact in float32
    return x, np.array(expected, np.float32)


def assert_same_cast(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(to_float32(want))
    assert np.array_equal(np.isnan(to_float32(got)), nan)
    np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])


@pytest.mark.parametrize("name", list(FORMATS))
def test_definitions_match_the_dtypes(name):
    top, min_normal, min_sub, _, over = SPECS[name]
    assert max_finite(name) == top
    dt = FORMATS[name]
    reps = np.array([top, min_normal, min_sub], np.float32).astype(dt)
    assert bits(reps).tolist() == list(BITS[name][:3])
    assert to_float32(reps).tolist() == [top, min_normal, min_sub]
    if over == "inf":
        assert int(bits(np.array([np.inf], np.float32).astype(dt))[0]) == BITS[name][3]


@pytest.mark.parametrize("name", list(FORMATS))
def test_edge_value_casts_are_bit_exact(name):
    x, expected = table_arrays(name)
    dt = FORMATS[name]
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_cast(x.astype(dt), expected.astype(dt))


@pytest.mark.parametrize("name", list(FORMATS))
def test_quantize_none_is_the_ml_dtypes_cast(name):
    x, _ = table_arrays(name)
    x = x[~np.isnan(x)]
    rng = np.random.default_rng(1)
    x = np.concatenate([x, (rng.standard_normal(500) * 10.0 ** rng.integers(-8, 6, 500)).astype(np.float32)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(FORMATS[name])
    r = quantize(x, name, NONE)
    assert r.codes.dtype == FORMATS[name]
    assert_same_cast(r.codes, want)
    assert r.scales.shape == (1,) and r.scales[0] == 1
    np.testing.assert_array_equal(r.values, to_float32(want))


@pytest.mark.parametrize("name", ["float8_e4m3", "float8_e5m2", "float16", "bfloat16"])
def test_overflow_count_is_what_the_cast_sends_to_inf_or_nan(name):
    top = max_finite(name)
    x = np.concatenate([np.linspace(0.9 * top, 1.2 * top, 4001), -np.linspace(top, 1.1 * top, 101)])
    x = np.clip(x, -FLOAT32_MAX, FLOAT32_MAX).astype(np.float32)  # bfloat16's max is near float32's
    with np.errstate(over="ignore", invalid="ignore"):
        lost = int(np.count_nonzero(~np.isfinite(to_float32(x.astype(FORMATS[name])))))
    assert lost > 0
    assert quantize(x, name, NONE).overflow == lost


def test_overflow_and_underflow_counts_without_scaling():
    x = np.array([70000, -1e5, 65519, 65520, 1e-8, 2.0**-25, 2.0**-25 * 1.01, 0, np.inf, 1], np.float32)
    r = quantize(x, "float16", NONE)
    assert (r.overflow, r.underflow) == (3, 2)  # 70000, -1e5, 65520 (tie -> inf); 1e-8, 2^-25 (tie -> 0)
    e2m1 = quantize(np.array([6.5, 6.99, 7, 8, -100, 0.25, 0.26], np.float32), "float4_e2m1", NONE)
    assert (e2m1.overflow, e2m1.underflow) == (3, 1)  # 7 (tie to 8), 8, -100 saturate to ±6; 0.25 -> 0
    assert to_float32(e2m1.codes).tolist() == [6, 6, 6, 6, -6, 0, 0.5]


def test_cast_vector_counts():
    x = np.array([70000, 65519, 65520, 1e-8, 2.0**-24, 0, -np.inf, 3], np.float32)
    rounded, over, under = cast_vector(x, "float16")
    assert rounded.dtype == np.float16
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(bits(rounded), bits(x.astype(np.float16)))
    assert (over, under) == (2, 1)
    rounded, over, under = cast_vector(np.array([1e39, -1e39, 1e-46, 1.0, 0.0]), "float32")
    assert rounded.dtype == np.float32 and (over, under) == (2, 1)


def test_mxfp4_block_scale_is_the_ocp_power_of_two():
    x = np.zeros((2, 64), np.float32)
    x[0, :6] = [15, 14, 13, 1, 0.3, -2.5]  # amax 15: floor(log2 15) - emax(e2m1)=2 -> 2**1
    x[0, 32:34] = [0.75, -0.1]  # amax 0.75: 2**(-1 - 2)
    x[1, 40] = 2.0**-140  # 2**-142 is below E8M0: clamped to 2**-127
    r = quantize(x, "float4_e2m1", MXFP4)
    assert r.scales.shape == (2, 2)
    np.testing.assert_array_equal(r.scales, np.array([[2.0, 2.0**-3], [1.0, 2.0**-127]], np.float32))
    assert bits(r.scales.astype(ml_dtypes.float8_e8m0fnu)).tolist() == [[128, 124], [127, 0]]
    codes = to_float32(r.codes)
    assert np.isin(np.abs(codes), E2M1_GRID).all()
    # 15/2 = 7.5 and 14/2 = 7 (tie to 8) saturate to 6; 13/2 = 6.5 rounds to 6; 0.15 -> 0; -1.25 -> -1
    assert codes[0, :6].tolist() == [6, 6, 6, 0.5, 0, -1]
    assert codes[0, 32:34].tolist() == [6, -1]  # -0.8 -> -1
    assert r.values[0, :6].tolist() == [12, 12, 12, 1, 0, -2]
    assert (r.overflow, r.underflow) == (2, 2)  # 0.3 and 2**-140 (2**-13 after scaling) become 0


def test_e8m0_scale_is_clamped_to_its_range():
    x = np.array([2.0**-140, 2.0**-149, 2.0**100], np.float32)  # floor(log2) - 127 far below -127
    r = quantize(x.reshape(3, 1), "bfloat16", Scaling("per_block", 1, "e8m0"))
    assert r.scales.ravel().tolist() == [2.0**-127, 2.0**-127, 2.0**-27]
    np.testing.assert_array_equal(r.values.ravel(), x)


@pytest.mark.parametrize("dtype", ["float4_e2m1", "float8_e4m3", "float8_e5m2", "float16", "bfloat16"])
def test_e8m0_scale_from_exponent_bits_is_the_spec_formula(dtype):
    """2**clip(floor(log2(amax)) - emax_elem, -127, 127) from frexp/ldexp, on every float32 exponent."""
    from vfasim.functional.quant import _e8m0_scale, emax

    tiny = np.float32(2.0**-149)
    powers = np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32)
    amax = np.concatenate([powers, powers * np.float32(1.5), np.nextafter(powers, np.float32(0)), [tiny],
                           [np.finfo(np.float32).max, np.float32(2.0**-126) - tiny]]).astype(np.float32)
    amax = amax[amax > 0]
    floor_log2 = np.frexp(amax)[1].astype(np.int32) - 1
    want = np.ldexp(np.float32(1), np.clip(floor_log2 - emax(dtype), -127, 127)).astype(np.float32)
    np.testing.assert_array_equal(_e8m0_scale(amax, dtype).view(np.int32), want.view(np.int32))


def test_mxfp4_zero_block_and_partial_block():
    x = np.zeros((3, 48), np.float32)
    x[2, 40:] = 3.0  # the partial block (16 of 32 elements) has its own scale
    r = quantize(x, "float4_e2m1", MXFP4)
    assert r.scales.shape == (3, 2)
    np.testing.assert_array_equal(r.scales[:2], 1)
    assert r.scales[2].tolist() == [1.0, 2.0**-1]  # floor(log2 3) - 2 = -1
    np.testing.assert_array_equal(r.values[:2], 0)
    assert not bits(r.codes[:2]).any()  # +0, not -0
    np.testing.assert_array_equal(r.values[2, 40:], 3.0)
    assert (r.overflow, r.underflow) == (0, 0)


def test_nvfp4_two_level_scale_hand_example():
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [168, 100, -50, 7]
    x[0, 16:20] = [10, 3, 1, 0.1]
    r = quantize(x, "float4_e2m1", NVFP4)
    # s_t = 168 / (448 * 6) = 2**-4; block 0: e4m3(168/6/s_t) = 448 -> scale 28;
    # block 1: 10/6/s_t = 26.67 -> e4m3 26 (spacing 2 in [16, 32)) -> scale 26/16 = 1.625
    assert r.scales.tolist() == [[28.0, 1.625]]
    # 100/28 = 3.57 -> 4; -50/28 = -1.79 -> -2; 7/28 = 0.25 ties to 0;
    # 10/1.625 = 6.15 -> 6 (saturated, but round-to-nearest gives 6 too); 3 -> 1.85 -> 2; 1 -> 0.62 -> 0.5
    assert r.values[0, :4].tolist() == [168, 112, -56, 0]
    assert r.values[0, 16:20].tolist() == [9.75, 3.25, 0.8125, 0]
    assert (r.overflow, r.underflow) == (0, 2)


def test_nvfp4_reconstructs_within_the_format_bound():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 8, 64)) * np.exp(rng.standard_normal((4, 8, 1)) * 1.5)).astype(np.float32)
    r = quantize(x, "float4_e2m1", NVFP4)
    assert r.scales.shape == (4, 8, 4) and (r.scales > 0).all()
    s_t = np.float32(np.abs(x).max()) / np.float32(448 * 6)
    block = r.scales / s_t  # within float32 rounding of an e4m3 value
    e4m3 = block.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_allclose(block, e4m3, rtol=2**-22)
    assert np.isin(np.abs(to_float32(r.codes)), E2M1_GRID).all()
    full = np.repeat(r.scales, 16, axis=-1)
    y = np.abs(x / full)
    half_gap = np.where(y < 2, 0.25, np.where(y < 4, 0.5, 1.0))  # e2m1 grid 0 .5 1 1.5 2 3 4 6
    assert (np.abs(r.values - x) <= full * half_gap * (1 + 1e-6)).all()
    assert r.overflow == 0  # e4m3 rounds a scale by < 6.25%: y < 6.375, below the overflow tie at 7


def test_nvfp4_block_scale_underflow_zeroes_the_block():
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16] = 2688.0, 1e-3  # s_t = 1; 1e-3 / 6 is below half of e4m3's 2**-9
    r = quantize(x, "float4_e2m1", NVFP4)
    assert r.scales.tolist() == [[448.0, 0.0]]
    assert r.values[0, 16] == 0 and r.underflow == 1


def test_per_tensor_scales_and_e8m0_saturation():
    x = np.array([[1000.0, 1e-3], [-500.0, 2.0]], np.float32)
    r = quantize(x, "float8_e4m3", Scaling("per_tensor"))
    assert r.scales.shape == (1, 1) and r.scales[0, 0] == np.float32(1000) / np.float32(448)
    assert r.values[0, 0] == pytest.approx(1000, rel=1e-6) and (r.overflow, r.underflow) == (0, 1)
    e8m0 = Scaling("per_tensor", scale_dtype="e8m0")
    hot = quantize(np.array([480.0, 1.0], np.float32), "float8_e4m3", e8m0)  # 2**(8 - 8) = 1
    assert hot.scales.tolist() == [1.0] and hot.values.tolist() == [448, 1] and hot.overflow == 1
    warm = quantize(np.array([460.0, 1.0], np.float32), "float8_e4m3", e8m0)  # 460 rounds to 448 anyway
    assert warm.values.tolist() == [448, 1] and warm.overflow == 0


def assert_same_result(a, b) -> None:
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(bits(a.codes), bits(b.codes))
    np.testing.assert_array_equal(a.scales, b.scales)
    assert (a.overflow, a.underflow) == (b.overflow, b.underflow)


SCALINGS = [Scaling("per_tensor"), Scaling("per_tensor", scale_dtype="e8m0"), MXFP4, NVFP4,
            Scaling("per_block", 5), Scaling("per_block", 16, "e8m0")]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: f"{s.kind}-{s.block}-{s.scale_dtype}")
@pytest.mark.parametrize("name", ["float4_e2m1", "float8_e4m3"])
def test_axis_minus_two_is_the_transposed_problem(name, scaling):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 40, 24)) * 4).astype(np.float32)
    on_rows = quantize(x, name, scaling, axis=-2)
    t = quantize(np.swapaxes(x, -1, -2), name, scaling, axis=-1)
    back = type(t)(np.swapaxes(t.values, -1, -2), np.swapaxes(t.codes, -1, -2), np.swapaxes(t.scales, -1, -2),
                   t.overflow, t.underflow)
    assert_same_result(on_rows, back)
    assert_same_result(quantize(x, name, scaling, axis=1), on_rows)


def test_blocks_do_not_depend_on_leading_shape():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4, 64)).astype(np.float32)
    for scaling in (MXFP4, Scaling("per_block", 8, "float32")):
        whole = quantize(x, "float8_e5m2", scaling)
        flat = quantize(x.reshape(12, 64), "float8_e5m2", scaling)
        np.testing.assert_array_equal(whole.values.reshape(12, 64), flat.values)
        np.testing.assert_array_equal(whole.scales.reshape(12, -1), flat.scales)


@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                  elements=st.floats(-400, 400, width=32)))
def test_none_is_idempotent(x):
    for name in FORMATS:
        once = quantize(x, name, NONE)
        twice = quantize(once.values, name, NONE)
        np.testing.assert_array_equal(bits(twice.codes), bits(once.codes))
        np.testing.assert_array_equal(twice.values, once.values)
        assert twice.underflow == 0


def test_check_block_divides():
    check_block_divides(64, 32, "head_dim")
    with pytest.raises(VfasimError, match="^block scale size 32 does not divide head_dim 48$"):
        check_block_divides(48, 32, "head_dim")


def test_presets():
    assert (MXFP4.kind, MXFP4.block, MXFP4.scale_dtype) == ("per_block", 32, "e8m0")
    assert (NVFP4.kind, NVFP4.block, NVFP4.scale_dtype) == ("per_block", 16, "float8_e4m3")


def test_unscaled_casts_pass_nan_through():
    out = quantize(np.array([1.0, np.nan], np.float32), "float8_e4m3", NONE).values
    assert out[0] == 1.0 and np.isnan(out[1])


@pytest.mark.parametrize("make,match", [
    (lambda: Scaling("blockwise"), "Scaling.kind 'blockwise'"),
    (lambda: Scaling("per_block", 0), "Scaling.block .* got 0"),
    (lambda: Scaling("per_block", -4), "Scaling.block .* got -4"),
    (lambda: Scaling("per_block", 32, "e5m2"), "Scaling.scale_dtype 'e5m2'"),
    (lambda: quantize(np.ones(4, np.float32), "float8", NONE), "format 'float8'"),
    (lambda: quantize(np.array([1.0, np.nan]), "float4_e2m1", MXFP4), "NaN"),
    (lambda: quantize(np.array([1.0, np.inf]), "float4_e2m1", NVFP4), "inf"),
    (lambda: quantize(np.ones((2, 4), np.float32), "float4_e2m1", MXFP4, axis=2), "axis 2"),
    (lambda: quantize(np.ones(4, np.float32), "bfloat16", NVFP4), "bfloat16"),
    (lambda: max_finite("int8"), "format 'int8'"),
    (lambda: cast_vector(np.ones(2), "bfloat16"), "vector format 'bfloat16'"),
])
def test_bad_inputs_name_what_is_wrong(make, match):
    with pytest.raises(VfasimError, match=match):
        make()


def test_a_tensor_scale_per_tile_does_not_depend_on_what_is_batched_with_it():
    # NVFP4's second level (an fp32 scale per tensor): P is quantised with one per score tile (tensor_ndim=2), so a
    # tile's values are the same alone or beside a tile of larger scores, as a step's rows are batched on any threads
    rng = np.random.default_rng(7)
    small, large = rng.random((1, 16, 32), np.float32), 1e3 * rng.random((1, 16, 32), np.float32)
    both = np.concatenate([small, large])
    alone = quantize(small, "float4_e2m1", NVFP4, tensor_ndim=2).values
    assert np.array_equal(quantize(both, "float4_e2m1", NVFP4, tensor_ndim=2).values[:1], alone)
    assert np.array_equal(quantize_values(both, "float4_e2m1", NVFP4, tensor_ndim=2)[0][:1], alone)  # the fast path
    assert not np.array_equal(quantize(both, "float4_e2m1", NVFP4).values[:1], alone)  # one scale over both: differs
    assert np.array_equal(quantize(small[0], "float4_e2m1", NVFP4, tensor_ndim=2).values, alone[0])  # 2D: one tensor
    with pytest.raises(VfasimError, match="blocks along the last axis"):
        quantize(both, "float4_e2m1", NVFP4, axis=1, tensor_ndim=2)


def test_nvfp4_p_gives_the_same_output_on_one_engine_thread_and_two():
    from vfasim.functional import run_engine
    from vfasim.functional.precision import Precision
    from vfasim.functional.tiling import Tiling
    from vfasim.workloads import random_workload

    prec = Precision(matmul="float4_e2m1", vector="float32", block_scale="nvfp4",
                     scaling={"q": "per_block", "k": "per_block", "v": "per_block", "p": "per_block"})
    wl = random_workload(1024, 64, seed=3, heads=8)
    t = Tiling(1024, 1024, 64, 64, 64, True, 8, 8)
    for algo in ("vfa", "fa4"):  # a frozen or stale max: P's tiles peak below 1, each at its own level
        outs = [run_engine(wl.q, wl.k, wl.v, t, algo, prec, threads=n, trace=False).out for n in (1, 2)]
        assert np.array_equal(outs[0], outs[1])  # a scale over a step's batch of rows differed here


def test_a_tensor_level_is_refused_where_the_scaling_has_none():
    x = np.ones((2, 16, 32), np.float32)
    for scaling in (NONE, Scaling("per_tensor")):
        with pytest.raises(VfasimError, match="has none"):
            quantize(x, "float4_e2m1", scaling, tensor_ndim=2)
        with pytest.raises(VfasimError, match="has none"):
            quantize_values(x, "float4_e2m1", scaling, tensor_ndim=2)
