"""Number formats of the functional engine: matmul inputs (with their scales) and the vector side.

Every cast goes through ml_dtypes / NumPy (round to nearest even); scaled formats
go through ``quant.quantize``.

Assumptions:
- Matmul products are exact and accumulated in float32 (BLAS order, not the
  hardware's adder tree: sums may differ from silicon in the last bits);
  dequantised inputs (codes × scale) enter the matmul, which equals applying the
  scales to the fp32 partial sums of each scale block.
- Vector-side values are held in float32 and rounded to the vector format after
  every elementwise step (``round_vector``): for fp16 this is what NumPy's float16
  arithmetic does (each op in float32, then rounded), bit for bit.
- Scale blocks run along each matmul's contraction axis: head_dim for Q and K,
  keys for V and P. "per_tensor" means the whole Q/K/V tensor, and one scale per
  score tile for P (the whole P never exists).
- Q/K/V arrive already quantised (their producer computed the scales); P's
  scales are computed in the kernel, as the ``quant_p`` vector op.
- A non-finite value (an upstream overflow) in a scaled operand stays NaN and the
  rest of its block is scaled without it; hardware would likely poison the whole
  block's scale. The row is reported broken either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import ml_dtypes
import numpy as np
import numpy.typing as npt

from vfasim.errors import VfasimError
from vfasim.formats import BITS, BLOCK_RULES, NUMPY_DTYPES, VECTOR_DTYPES
from vfasim.functional import quant
from vfasim.functional.arrays import all_finite

ENGINE_VECTOR_DTYPES = tuple(VECTOR_DTYPES)
OPERANDS = ("q", "k", "v", "p")
#: named per-block scale rules (quant.Scaling values)
BLOCK_SCALES: dict[str, quant.Scaling] = {name: quant.Scaling("per_block", r.block, r.scale)
                                          for name, r in BLOCK_RULES.items()}
NO_SCALING = {"q": "none", "k": "none", "v": "none", "p": "none"}


class Rounding(Protocol):
    """``Precision.round_vector``'s signature: a rounding the engine calls, in place where ``out`` is ``x``."""

    def __call__(self, x: npt.ArrayLike, out: np.ndarray | None = None) -> np.ndarray: ...


@dataclass(frozen=True)
class Precision:
    matmul: str = "float16"
    vector: str = "float32"
    scaling: dict[str, str] = field(default_factory=lambda: dict(NO_SCALING))  # operand -> kind
    block_scale: str | None = None  # key of BLOCK_SCALES, for per_block operands

    def __post_init__(self) -> None:
        if self.matmul not in BITS:
            raise VfasimError(f"matmul dtype {self.matmul!r} is not one of {', '.join(BITS)}")
        if self.vector not in ENGINE_VECTOR_DTYPES:
            raise VfasimError(f"vector dtype {self.vector!r} is not supported by the engine "
                              f"(supported: {', '.join(ENGINE_VECTOR_DTYPES)})")
        _check_scaling(self)

    @property
    def vector_np(self) -> np.dtype:
        return NUMPY_DTYPES[self.vector]

    def round_vector(self, x: npt.ArrayLike, out: np.ndarray | None = None) -> np.ndarray:
        """float32 holding ``x`` rounded to the vector format; ``out``: where to write it (``x`` itself, a float32
        array the caller owns, to round in place: no new array).

        The engine keeps vector-side values in float32 and rounds after every step:
        bit for bit what NumPy's float16 arithmetic does (it computes each op in
        float32 and rounds), without its slow path for fp16 subnormals.
        """
        if self.vector == "float16":
            return round_float16(x, out)
        if out is None:
            return np.asarray(x, dtype=np.float32)
        if out is not x:
            np.copyto(out, x)
        return out

    def rule(self, operand: str) -> quant.Scaling:
        kind = self.scaling[operand]
        if kind != "per_block":
            return quant.Scaling(kind)
        assert self.block_scale is not None  # _check_scaling requires it when an operand is per_block
        return BLOCK_SCALES[self.block_scale]

    def check_shapes(self, head_dim: int, block_k: int) -> None:
        """Scale blocks must tile the contraction axes: head_dim (Q, K), block_k (V, P)."""
        for operand, length, name in (("q", head_dim, "head_dim"), ("k", head_dim, "head_dim"),
                                      ("v", block_k, "block_k"), ("p", block_k, "block_k")):
            if self.scaling[operand] == "per_block":
                quant.check_block_divides(length, self.rule(operand).block, name)

    def to_matmul(self, x: np.ndarray, operand: str = "p", axis: int = -1) -> tuple[np.ndarray, int, int]:
        """(float32 values the matmul consumes, overflow count, underflow count)."""
        if self.matmul == "float32":
            return x.astype(np.float32, copy=False), 0, 0
        if self.scaling[operand] == "none" and self.matmul == "float16":
            out = round_float16(x)
            over = 0 if all_finite(out) else int(np.count_nonzero(np.isinf(out) & np.isfinite(x)))
            return out, over, int(np.count_nonzero((out == 0) & (x != 0)))
        if not all_finite(x):  # an upstream overflow: scale the rest, keep the damage visible as NaN
            bad = ~np.isfinite(x)
            values, over, under = self.to_matmul(np.where(bad, np.float32(0), x), operand, axis)
            return np.where(bad, np.float32(np.nan), values), over, under
        rule = self.rule(operand)
        if operand == "p" and rule.kind == "per_tensor":  # one scale per score tile
            flat = x.reshape(*x.shape[:-2], -1)
            values, over, under = quant.quantize_values(flat, self.matmul, quant.Scaling("per_block", flat.shape[-1]))
            return values.reshape(x.shape), over, under
        if operand == "p" and rule.kind == "per_block" and x.ndim >= 2:  # a tensor scale per score tile
            return quant.quantize_values(x, self.matmul, rule, axis=axis, tensor_ndim=2)
        return quant.quantize_values(x, self.matmul, rule, axis=axis)

    def for_p(self, bf16: bool) -> Precision:
        """The precision P is cast with for PV: this one, or bf16 unscaled (a mitigation)."""
        return Precision(matmul="bfloat16", vector=self.vector) if bf16 else self

    def p_cast_limit(self) -> float:
        """How far (natural log) P may sit below 1 before its cast leaves the format's normal range.

        Infinite when P is scaled (its scale follows its magnitude) or not cast at all.
        """
        if self.scaling["p"] != "none" or self.matmul == "float32":
            return float("inf")
        return float(-np.log(np.float64(ml_dtypes.finfo(NUMPY_DTYPES[self.matmul]).tiny)))

    def bytes_per(self, operand: str) -> float:
        """Bytes moved per element of a Q/K/V/O tile, scale bytes included."""
        if operand == "o":
            return NUMPY_DTYPES[self.vector].itemsize
        bits: float = BITS[self.matmul]
        if self.scaling[operand] == "per_block":
            rule = self.rule(operand)
            bits += quant.SCALE_DTYPES[rule.scale_dtype].itemsize * 8 / rule.block
        return bits / 8


def _check_scaling(p: Precision) -> None:
    if set(p.scaling) != set(OPERANDS):
        raise VfasimError(f"precision.scaling must name exactly {', '.join(OPERANDS)}")
    for operand, kind in p.scaling.items():
        if kind not in quant.SCALING_KINDS:
            raise VfasimError(f"precision.scaling.{operand} {kind!r} is not one of {', '.join(quant.SCALING_KINDS)}")
    if "per_block" in p.scaling.values() and p.block_scale not in BLOCK_SCALES:
        raise VfasimError(f"precision.block_scale must be one of {', '.join(BLOCK_SCALES)} "
                          f"when an operand is scaled per block, got {p.block_scale!r}")
    if p.matmul == "float4_e2m1" and any(p.scaling[o] == "none" for o in OPERANDS):
        raise VfasimError("float4_e2m1 matmul inputs need a scale rule for q, k, v and p (precision.scaling)")


_FP16_TOP_EXPONENT = 15 + 127  # biased float32 exponent of 2**15: below it, nothing rounds past fp16's largest, 65504


def round_float16(x: npt.ArrayLike, out: np.ndarray | None = None) -> np.ndarray:
    """float32 holding NumPy's float32 -> float16 cast of ``x``, bit for bit; ``out``: where to write it (``x``
    itself, a float32 array, to round in place).

    The cast itself costs ~60 ns an element on fp16's subnormals (most of attention's P),
    so values are rounded in float32 (``quant.round_on_grid``, under 1 ns an element);
    the rare overflow to ±inf and NaN (whose payload the cast truncates) are then taken
    from the cast of every value from 2**15 up (exponent field, Inf and NaN included), looked
    for only when there is one (the cast of those below 65520, where rounding leaves 65504, is
    what the rounding gives). The tests compare this with the cast on edge values and
    random data.
    """
    x = np.asarray(x, dtype=np.float32)
    fields, top = quant.exponent_fields(x)
    odd = None
    if top >= _FP16_TOP_EXPONENT:  # taken before ``out`` (maybe x) is written, and ``fields`` used up
        odd = fields >= np.int32(_FP16_TOP_EXPONENT << 23)
        with np.errstate(over="ignore"):
            cast = x[odd].astype(np.float16).astype(np.float32)
    out = quant.round_on_grid(x, fields, *quant.grid("float16")[:2], out=out)  # past 2**114: NaN, fixed below
    if odd is not None:
        out[odd] = cast
    return out
