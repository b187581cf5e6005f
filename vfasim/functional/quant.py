"""Bit-exact quantisation of matmul inputs to 16/8/4-bit formats, with optional scaling.

Complements ``precision.Precision`` (which rounds to float32/float16/bfloat16 with no
scale) with the scaled low-precision inputs of the VFA paper's C16/C8/C4 configs.
``quantize`` is the reference: every cast an ``.astype`` through ml_dtypes / NumPy (round
to nearest, ties to even), scale arithmetic in float32. ``quantize_values`` is what the
engine calls: the same values and counts, bit for bit, from float32 arithmetic alone
(``round_nearest_even``) where the format allows, else from ``quantize``; the tests
compare the two on edge values.

Scalings:
- ``none``: ``x.astype(format)``, exactly ml_dtypes' cast. Out-of-range values become
  inf (float16, bfloat16, float8_e5m2), NaN (float8_e4m3fn has no inf) or ±6
  (float4_e2m1fn has neither; ml_dtypes saturates). Non-finite inputs go through the
  same cast and are not counted.
- ``per_tensor`` / ``per_block``: codes = saturating cast of x / scale (clip to
  ±max_finite, then cast), as MX and NVFP4 hardware converts.
  * scale_dtype ``float32``: scale = amax / max_finite (1 where amax is 0).
  * scale_dtype ``e8m0``: the OCP MX v1.0 rule (spec §6.3), shared_exp =
    floor(log2(amax)) - emax_elem, scale = 2**shared_exp, clamped to E8M0's range
    [2**-127, 2**127] (as the microxcaling reference does). floor() rounds the scale
    *down*: x / scale reaches up to just under 2**(emax_elem + 1) (8 for e2m1, whose
    max is 6), so a block's largest elements may saturate; the spec accepts that
    for one more bit of resolution on everything else.
  * scale_dtype ``float8_e4m3`` (NVFP4): two levels, an fp32 tensor scale
    s_t = amax / (448 * max_finite) and e4m3 block scales round_e4m3(block_amax /
    max_finite / s_t); the effective scale is s_t * e4m3 scale, rounded to float32.
    The tensor is the whole input, or each sub-array of its last ``tensor_ndim`` axes
    (P: each score tile, so that its bits do not depend on the rows batched with it).

Counts:
- overflow: finite elements whose round-to-nearest-even value lies beyond max_finite,
  i.e. those an unbounded-exponent cast would send past ±max. They became inf/NaN
  ('none') or were saturated to ±max (scaled, and float4_e2m1fn's 'none' cast).
  Values in (max, threshold) round to max anyway and are not counted.
- underflow: nonzero inputs whose code is zero.

Assumptions:
- Inputs are taken as float32 (float64 is rounded to float32 first); NaN and inf are
  refused when a scale has to be computed, and pass through an unscaled cast.
- per_block pads the last partial block logically with zeros (it does not change the
  block's amax); callers that need whole blocks use ``check_block_divides``.
- An NVFP4 block scale that underflows e4m3 to 0 makes its block all zeros (counted as
  underflow); hardware could differ in how it handles a zero scale.
- Dequantised values are codes * effective scale in float32: for NVFP4 the product
  s_t * e4m3 scale is rounded once to float32, where hardware may apply s_t after the
  matmul instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from vfasim.errors import VfasimError
from vfasim.formats import BLOCK_RULES, MATMUL_DTYPES, SCALE_DTYPES, VECTOR_DTYPES
from vfasim.functional.arrays import all_finite

FORMATS, VECTOR_FORMATS = MATMUL_DTYPES, VECTOR_DTYPES  # matmul input and vector formats (vfasim.formats)
SCALING_KINDS = ("none", "per_tensor", "per_block")
E8M0_EXP_RANGE = (-127, 127)  # 0xFF is NaN, so 2**-127 .. 2**127


@dataclass(frozen=True)
class Scaling:
    kind: str  # "none" | "per_tensor" | "per_block"
    block: int = 32  # elements per scale block along the contraction axis (per_block only)
    scale_dtype: str = "float32"  # "float32" | "e8m0" | "float8_e4m3"

    def __post_init__(self) -> None:
        if self.kind not in SCALING_KINDS:
            raise VfasimError(f"Scaling.kind {self.kind!r} is unknown (known: {', '.join(SCALING_KINDS)})")
        if isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1:
            raise VfasimError(f"Scaling.block must be an integer >= 1, got {self.block!r}")
        if self.scale_dtype not in SCALE_DTYPES:
            raise VfasimError(f"Scaling.scale_dtype {self.scale_dtype!r} is unknown "
                              f"(known: {', '.join(SCALE_DTYPES)})")


MXFP4 = Scaling("per_block", BLOCK_RULES["mxfp4"].block, BLOCK_RULES["mxfp4"].scale)  # OCP MX v1.0
NVFP4 = Scaling("per_block", BLOCK_RULES["nvfp4"].block, BLOCK_RULES["nvfp4"].scale)  # NVIDIA NVFP4


@dataclass(frozen=True)
class QuantResult:
    values: np.ndarray  # float32 dequantised values (codes * scale): what the matmul consumes
    codes: np.ndarray  # raw low-precision array (ml_dtypes dtype), same shape as x
    scales: np.ndarray  # float32 effective; per_block: x.shape, axis -> n_blocks; else shape (1,) * x.ndim
    overflow: int  # finite elements pushed past ±max_finite (became inf/NaN, or saturated)
    underflow: int  # nonzero inputs that became zero


def format_dtype(dtype: str) -> np.dtype:
    if dtype not in FORMATS:
        raise VfasimError(f"quantisation format {dtype!r} is unknown (known: {', '.join(FORMATS)})")
    return FORMATS[dtype]


@functools.cache  # the engine asks a few times a step; ml_dtypes.finfo is built each time
def max_finite(dtype: str) -> float:
    """Largest finite value of a matmul input format (448 for float8_e4m3, 6 for float4_e2m1)."""
    return float(ml_dtypes.finfo(format_dtype(dtype)).max)


@functools.cache
def emax(dtype: str) -> int:
    """Exponent of the format's largest normal number (the MX spec's emax_elem)."""
    return int(np.frexp(max_finite(dtype))[1]) - 1


def to_float32(codes: np.ndarray) -> np.ndarray:
    return codes.astype(np.float32)


def check_block_divides(length: int, block: int, name: str) -> None:
    if length % block:
        raise VfasimError(f"block scale size {block} does not divide {name} {length}")


def cast_vector(x: np.ndarray, dtype: str) -> tuple[np.ndarray, int, int]:
    """Round to a vector format by plain astype: (rounded, finite->inf count, nonzero->0 count)."""
    if dtype not in VECTOR_FORMATS:
        raise VfasimError(f"vector format {dtype!r} is unknown (known: {', '.join(VECTOR_FORMATS)})")
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        rounded = x.astype(VECTOR_FORMATS[dtype])
    overflow = int(np.count_nonzero(np.isfinite(x) & np.isinf(rounded)))
    underflow = int(np.count_nonzero((x != 0) & (rounded == 0)))
    return rounded, overflow, underflow


def overflow_mask(y: np.ndarray, dtype: str) -> np.ndarray:
    """Finite elements that round (to nearest even, unbounded exponent) beyond ±max_finite.

    The threshold is max + half an ulp of the top binade; a tie there goes up
    only when max's significand is odd (all IEEE formats and e2m1; not e4m3fn,
    whose max 1.110b·2^8 is even because 1.111b·2^8 encodes NaN).
    """
    top, ulp = max_finite(dtype), 2.0 ** (emax(dtype) - ml_dtypes.finfo(FORMATS[dtype]).nmant)
    threshold, tie_up = top + ulp / 2, round(top / ulp) % 2 == 1
    mag = np.abs(y.astype(np.float64))
    beyond = (mag >= threshold) if tie_up else (mag > threshold)
    return beyond & np.isfinite(mag)


@functools.cache
def grid(dtype: str) -> tuple[int, int, int]:
    """(mantissa bits, smallest normal exponent, largest exponent) of a matmul input format."""
    info = ml_dtypes.finfo(format_dtype(dtype))
    return int(info.nmant), int(np.log2(float(info.smallest_normal))), emax(dtype)


_EXPONENT_BITS, _SIGN_BIT = np.int32(0x7F800000), np.int32(-(2**31))


def round_nearest_even(x: np.ndarray, mant_bits: int, emin: int, emax_: int | None = None,
                       out: np.ndarray | None = None) -> np.ndarray:
    """float32 ``x`` rounded to nearest, ties to even, on a binary format's grid; -0 kept.

    The grid: ``mant_bits`` fraction bits, normal exponents from ``emin``, subnormal
    spacing 2**(emin - mant_bits) below. Adding C = 1.5 · 2**(e + 23 - mant_bits), e being
    x's exponent (at least ``emin``), puts the float32 sum's last bit at one step of that
    grid, so float32's own rounding rounds x, and subtracting C is exact. With ``emax_``,
    e is also held at most ``emax_`` + 1, so magnitudes past the top binade stay (near)
    where they are; without it, those past 2**(104 + mant_bits) become NaN. Overflow
    is the caller's. NaN stays NaN (payload not as a cast would leave it). ``out``: a
    float32 array of ``x``'s shape to write the result into (``x`` itself, to round in place).
    """
    x = np.asarray(x, dtype=np.float32)
    return round_on_grid(x, exponent_fields(x)[0], mant_bits, emin, emax_, out)


def exponent_fields(x: np.ndarray) -> tuple[np.ndarray, int]:
    """(each element's float32 exponent field, in place in an int32, the largest biased exponent) of float32 ``x``.

    The exponent is 255 when ``x`` holds an Inf or NaN, so one integer compare tells a
    caller whether anything can have left a format's range.
    """
    fields = np.bitwise_and(x.view(np.int32), _EXPONENT_BITS, out=np.empty(x.shape, np.int32))
    return fields, int(fields.max(initial=0)) >> 23


def round_on_grid(x: np.ndarray, fields: np.ndarray, mant_bits: int, emin: int, emax_: int | None = None,
                  out: np.ndarray | None = None) -> np.ndarray:
    """``round_nearest_even`` of float32 ``x`` from its ``exponent_fields`` (used up as scratch)."""
    if emax_ is not None and emax_ + 24 - mant_bits > 127:
        raise VfasimError(f"cannot round to {mant_bits} mantissa bits up to 2**{emax_} within float32")
    c, bits = fields, x.view(np.int32)
    # a clip with both bounds runs ~4x faster than np.maximum with one (NumPy 2.x, int32)
    np.clip(c, np.int32((emin + 127) << 23), _EXPONENT_BITS if emax_ is None else np.int32((emax_ + 128) << 23),
            out=c)
    c += np.int32(((23 - mant_bits) << 23) | 0x400000)
    # x + C - C has x's sign unless it is +0: a negative x that rounds to zero (at most half the grid's
    # smallest step, -0 included) needs its sign back. As int32 a negative float lies below every other
    # value, and the smaller its magnitude the lower, so the lowest int32 tells whether one is there.
    half_step = np.float32(2.0 ** (emin - mant_bits - 1)).view(np.int32)
    signs = np.bitwise_and(bits, _SIGN_BIT) if bits.size and int(bits.min()) <= _SIGN_BIT + half_step else None
    out = np.empty_like(x) if out is None else out
    with np.errstate(invalid="ignore"):  # a signalling NaN, or inf - inf past the range
        np.add(x, c.view(np.float32), out=out)
        np.subtract(out, c.view(np.float32), out=out)
    if signs is not None:  # OR-ing the sign bit in is copysign at a third of its cost
        out.view(np.int32)[...] |= signs
    return out


def quantize_values(x: np.ndarray, dtype: str, scaling: Scaling, axis: int = -1,
                    tensor_ndim: int | None = None) -> tuple[np.ndarray, int, int]:
    """``quantize``'s (values, overflow, underflow), bit for bit, without the codes and scales.

    Rounds in float32 (``round_nearest_even``) when ``dtype`` fits float32's exponent range,
    the input is finite, blocks tile ``axis`` and no unscaled value overflows (a cast to
    inf or NaN); otherwise it is ``quantize`` itself.
    """
    _check_tensor_ndim(scaling, tensor_ndim)
    x = np.asarray(x, dtype=np.float32)
    if not _fast_ok(x, dtype, scaling, axis):
        return _reference_values(x, dtype, scaling, axis, tensor_ndim)
    if scaling.kind == "per_block":
        return _fast_blocks(x, dtype, scaling, _norm_axis(axis, x.ndim), tensor_ndim)
    scale = np.ones((1,) * x.ndim, np.float32)
    if scaling.kind == "per_tensor":
        amax = np.max(np.abs(x), initial=np.float32(0)).reshape((1,) * x.ndim)
        scale = _scale_from_amax(amax, amax.max(), dtype, scaling.scale_dtype)
    out = _fast_scaled(x, scale, dtype, saturate=scaling.kind != "none")
    return out if out is not None else _reference_values(x, dtype, scaling, axis, tensor_ndim)


def _reference_values(x: np.ndarray, dtype: str, scaling: Scaling, axis: int,
                      tensor_ndim: int | None) -> tuple[np.ndarray, int, int]:
    res = quantize(x, dtype, scaling, axis, tensor_ndim)
    return res.values, res.overflow, res.underflow


def _fast_ok(x: np.ndarray, dtype: str, scaling: Scaling, axis: int) -> bool:
    if dtype not in FORMATS or grid(dtype)[2] + 24 - grid(dtype)[0] > 127 or x.ndim == 0:
        return False
    if scaling.kind == "per_block" and x.shape[_norm_axis(axis, x.ndim)] % scaling.block:
        return False
    return all_finite(x)


def _fast_blocks(x: np.ndarray, dtype: str, scaling: Scaling, axis: int,
                 tensor_ndim: int | None) -> tuple[np.ndarray, int, int]:
    xl = np.moveaxis(x, axis, -1)
    blocks = xl.reshape(xl.shape[:-1] + (xl.shape[-1] // scaling.block, scaling.block))
    amax = _block_absmax(blocks)
    scales = _scale_from_amax(amax, _tensor_amax(amax, axis, tensor_ndim), dtype, scaling.scale_dtype)
    out = _fast_scaled(blocks, scales[..., None], dtype, saturate=True)
    assert out is not None  # saturating: never handed back to the reference
    values, over, under = out
    return np.moveaxis(values.reshape(xl.shape), -1, axis), over, under


def _block_absmax(blocks: np.ndarray) -> np.ndarray:
    """max |x| over the last axis of finite ``blocks``, reduced on the bits (|x| orders as its bits do)."""
    mags = np.bitwise_and(blocks.view(np.int32), np.int32(0x7FFFFFFF)).ravel()
    if mags.size == 0:
        return np.zeros(blocks.shape[:-1], np.float32)
    # reduceat over the flat blocks: a max along a short last axis costs about twice as much
    starts = np.arange(0, mags.size, blocks.shape[-1])
    return np.maximum.reduceat(mags, starts).reshape(blocks.shape[:-1]).view(np.float32)


def _fast_scaled(x: np.ndarray, scale: np.ndarray, dtype: str,
                 saturate: bool) -> tuple[np.ndarray, int, int] | None:
    """Round x / scale (zero where the scale is 0) and scale back; None if an unsaturated value overflows."""
    if np.all(scale == 1):
        y = x
    elif np.all(scale != 0):
        y = x / scale
    else:
        y = np.divide(x, scale, out=np.zeros(np.broadcast_shapes(x.shape, np.shape(scale)), np.float32),
                      where=scale != 0)
    r = round_nearest_even(y, *grid(dtype), out=None if y is x else y)  # y, when made here, is rounded in place
    top, over = np.float32(max_finite(dtype)), 0
    high, low = r.max(initial=0) > top, r.min(initial=0) < -top
    if high or low:
        if not saturate:
            return None
        over = (int(np.count_nonzero(r > top)) if high else 0) + (int(np.count_nonzero(r < -top)) if low else 0)
        np.clip(r, -top, top, out=r)
    under = int(np.count_nonzero(r == 0) - np.count_nonzero(x == 0))
    if y is not x:
        np.multiply(r, scale, out=r)
    return r, over, under


def quantize(x: np.ndarray, dtype: str, scaling: Scaling, axis: int = -1,
             tensor_ndim: int | None = None) -> QuantResult:
    """Quantise ``x`` to ``dtype`` with ``scaling`` (blocks along ``axis``); see the module doc. ``tensor_ndim``: a
    block scale's tensor level (NVFP4's second one) is taken over each sub-array of ``x``'s last ``tensor_ndim`` axes,
    each a tensor of its own (blocks along the last axis only); None: over all of ``x``."""
    _check_tensor_ndim(scaling, tensor_ndim)
    fmt = format_dtype(dtype)
    x = _checked_input(x, scaling)
    if scaling.kind == "none":
        scales = np.ones((1,) * x.ndim, np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            codes = x.astype(fmt)
        return _result(codes, scales, scales, overflow_mask(x, dtype), x)
    if scaling.kind == "per_tensor":
        amax = np.max(np.abs(x), initial=np.float32(0)).reshape((1,) * x.ndim)
        scales = _scale_from_amax(amax, amax.max(), dtype, scaling.scale_dtype)
        return _scaled(x, dtype, scales, scales)
    return _quantize_blocks(x, dtype, scaling, _norm_axis(axis, x.ndim), tensor_ndim)


def _check_tensor_ndim(scaling: Scaling, tensor_ndim: int | None) -> None:
    if tensor_ndim is not None and scaling.kind != "per_block":
        raise VfasimError(f"tensor_ndim sets a block scale's tensor level; {scaling.kind} scaling has none")


def _tensor_amax(block_amax: np.ndarray, axis: int, tensor_ndim: int | None) -> np.ndarray:
    """The tensor level's amax: over every block, or (``tensor_ndim``) over each tensor of the last axes, shaped to
    broadcast against ``block_amax`` (the blocks' amax, blocks along the last axis)."""
    if tensor_ndim is None:
        return np.max(block_amax, initial=np.float32(0))
    if axis != block_amax.ndim - 1 or not 1 <= tensor_ndim <= block_amax.ndim:
        raise VfasimError(f"a tensor scale over the last {tensor_ndim} axes needs blocks along the last axis of an "
                          f"array of at least that many dimensions")
    return np.max(block_amax, axis=tuple(range(block_amax.ndim - tensor_ndim, block_amax.ndim)), keepdims=True,
                  initial=np.float32(0))


def _checked_input(x: np.ndarray, scaling: Scaling) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if scaling.kind != "none" and np.isnan(x).any():
        raise VfasimError("quantize input contains NaN: no scale can be computed")
    if scaling.kind != "none" and np.isinf(x).any():
        raise VfasimError(f"quantize input contains inf: no {scaling.kind} scale can be computed")
    return x


def _norm_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise VfasimError(f"quantize axis {axis} is out of range for an array of {ndim} dimensions")
    return axis % ndim


def _quantize_blocks(x: np.ndarray, dtype: str, scaling: Scaling, axis: int, tensor_ndim: int | None) -> QuantResult:
    xl = np.moveaxis(x, axis, -1)
    n, block = xl.shape[-1], scaling.block
    n_blocks = -(-n // block)
    padded = np.zeros(xl.shape[:-1] + (n_blocks * block,), np.float32)
    padded[..., :n] = np.abs(xl)
    block_amax = padded.reshape(xl.shape[:-1] + (n_blocks, block)).max(axis=-1)
    scales = _scale_from_amax(block_amax, _tensor_amax(block_amax, axis, tensor_ndim), dtype, scaling.scale_dtype)
    full = np.moveaxis(np.repeat(scales, block, axis=-1)[..., :n], -1, axis)
    return _scaled(x, dtype, np.moveaxis(scales, -1, axis), full)


def _scale_from_amax(amax: np.ndarray, tensor_amax: np.ndarray, dtype: str, scale_dtype: str) -> np.ndarray:
    """Effective float32 scale for each amax (1 where amax is 0)."""
    top = np.float32(max_finite(dtype))
    if scale_dtype == "e8m0":
        scale = _e8m0_scale(amax, dtype)
    elif scale_dtype == "float8_e4m3":
        scale = _two_level_scale(amax, tensor_amax, dtype)
    else:
        scale = amax / top
    return np.where(amax == 0, np.float32(1), scale).astype(np.float32)


def _e8m0_scale(amax: np.ndarray, dtype: str) -> np.ndarray:
    """OCP MX v1.0 §6.3: 2**(floor(log2(amax)) - emax_elem), clamped to E8M0's range.

    For a finite amax >= 0, floor(log2(amax)) is its float32 exponent field less 127; a
    subnormal amax reads as -127, and its true exponent (below that) clamps to the same
    scale since emax_elem >= 0. Every E8M0 value is a float32, 2**-127 the one subnormal.
    (amax 0 is mapped to scale 1 by the caller.) The tests compare this with frexp/ldexp.
    """
    biased = np.right_shift(np.asarray(amax, np.float32).view(np.int32), 23)
    shared_exp = np.clip(biased - (127 + emax(dtype)), *E8M0_EXP_RANGE)
    scale = np.where(shared_exp > E8M0_EXP_RANGE[0], (shared_exp + 127) << 23, np.int32(1 << 22))
    return scale.astype(np.int32).view(np.float32)


def _two_level_scale(amax: np.ndarray, tensor_amax: np.ndarray, dtype: str) -> np.ndarray:
    """NVFP4: s_t * round_e4m3(amax / max / s_t), s_t = tensor_amax / (448 * max) in float32 (a tensor_amax that
    broadcasts against amax: one per tensor)."""
    top, e4m3_max = np.float32(max_finite(dtype)), np.float32(448)
    if float(e4m3_max) * float(top) > float(np.finfo(np.float32).max):
        raise VfasimError(f"float8_e4m3 scales need 448 * max_finite({dtype}) within float32, "
                          f"which {dtype} exceeds")
    t = np.asarray(tensor_amax, np.float32)
    s_t = np.where(t > 0, t / (e4m3_max * top), np.float32(1)).astype(np.float32)
    block_scale = np.clip(amax / top / s_t, 0, e4m3_max).astype(SCALE_DTYPES["float8_e4m3"])
    return (s_t * block_scale.astype(np.float32)).astype(np.float32)


def _scaled(x: np.ndarray, dtype: str, scales: np.ndarray, full_scales: np.ndarray) -> QuantResult:
    """Saturating cast of x / scale; a zero scale (e4m3 underflow) gives zeros."""
    y = np.divide(x, full_scales, out=np.zeros_like(x), where=full_scales != 0)
    top = np.float32(max_finite(dtype))
    codes = np.clip(y, -top, top).astype(FORMATS[dtype])
    return _result(codes, scales, full_scales, overflow_mask(y, dtype), x)


def _result(codes: np.ndarray, scales: np.ndarray, full_scales: np.ndarray,
            overflow: np.ndarray, x: np.ndarray) -> QuantResult:
    with np.errstate(invalid="ignore"):
        values = np.asarray(to_float32(codes) * full_scales)
    underflow = int(np.count_nonzero((x != 0) & (to_float32(codes) == 0)))
    return QuantResult(values, codes, scales, int(np.count_nonzero(overflow)), underflow)
