"""Number formats: one table of each format's facts, from which every list of formats is derived.

A row gives a format's name (as traces and configs write it), its NumPy / ml_dtypes type, its
storage bits and where it is allowed: a matmul input the engine rounds to (``matmul``), vector-side
arithmetic (``vector``), a scale's type (``scale``). A matmul format a user may pick on a real chip
(``matmul_format=``) also has that name, the names measurement tables give it, and the scaling a
shipping kernel uses with it. Per-block scale rules are a second table (one rule serves several
formats). The trace's data types are the formats allowed on the matmul or the vector side, in the
table's order, which is their code in a trace: add a format at the end of those.

Assumptions (the scaling a shipping kernel uses):
- fp16 / bf16: no scaling.
- fp8 (e4m3 / e5m2): FlashAttention-3's FP8 path, one fp32 descale per tensor for
  Q, K and V; P in [0, 1] cast to fp8 unscaled.
- fp4 (e2m1): NVFP4, blocks of 16 elements with an E4M3 scale, on every operand
  (Q, K, V and P), as Blackwell's block-scaled MMA takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

Use = Literal["matmul", "vector", "scale"]
#: per-block scale rules a config may name (keys of ``BLOCK_RULES``)
BlockScaleName = Literal["mxfp4", "nvfp4", "mx"]
#: vector-side formats a config may name (the formats with the ``vector`` use)
VectorFormat = Literal["float32", "float16"]
#: the classes of matmul formats a kernel's tile table distinguishes
FormatClass = Literal["16bit", "8bit", "4bit"]


@dataclass(frozen=True)
class NumberFormat:
    """One number format's facts."""

    dtype: np.dtype
    bits: int  # storage bits per element
    uses: frozenset[Use]
    user_name: str | None = None  # the name matmul_format= takes (a format a user may pick on a real chip)
    table_names: tuple[str, ...] = ()  # other names measurement tables give it
    scaling: tuple[tuple[str, str], ...] = ()  # operand -> scale kind a shipping kernel uses (unset: none)
    block_scale: BlockScaleName | None = None  # the per-block rule of its per_block operands


@dataclass(frozen=True)
class BlockRule:
    """A per-block scale rule: elements per scale block and the scale's format."""

    block: int
    scale: str


_FP8 = (("q", "per_tensor"), ("k", "per_tensor"), ("v", "per_tensor"), ("p", "none"))
_FP4 = (("q", "per_block"), ("k", "per_block"), ("v", "per_block"), ("p", "per_block"))
_M: Use = "matmul"
_V: Use = "vector"
_S: Use = "scale"

FORMATS: dict[str, NumberFormat] = {
    "float32": NumberFormat(np.dtype(np.float32), 32, frozenset({_V, _S})),
    "e8m0": NumberFormat(np.dtype(ml_dtypes.float8_e8m0fnu), 8, frozenset({_S})),
    "float16": NumberFormat(np.dtype(np.float16), 16, frozenset({_M, _V}), "fp16", ("16bit",)),
    "bfloat16": NumberFormat(np.dtype(ml_dtypes.bfloat16), 16, frozenset({_M}), "bf16"),
    "float8_e4m3": NumberFormat(np.dtype(ml_dtypes.float8_e4m3fn), 8, frozenset({_M, _S}), "fp8_e4m3", (), _FP8),
    "float8_e5m2": NumberFormat(np.dtype(ml_dtypes.float8_e5m2), 8, frozenset({_M}), "fp8_e5m2", (), _FP8),
    "float4_e2m1": NumberFormat(np.dtype(ml_dtypes.float4_e2m1fn), 4, frozenset({_M}), "fp4", (), _FP4, "nvfp4"),
}
BLOCK_RULES: dict[str, BlockRule] = {
    "mxfp4": BlockRule(32, "e8m0"),  # OCP MX v1.0: 32-element blocks, E8M0 shared scale
    "nvfp4": BlockRule(16, "float8_e4m3"),  # NVIDIA NVFP4: 16-element blocks, E4M3 + fp32 tensor scale
    "mx": BlockRule(32, "e8m0"),
}


def _with(use: Use) -> dict[str, np.dtype]:
    return {name: f.dtype for name, f in FORMATS.items() if use in f.uses}


#: data types an op's work can be in (matmul inputs, vector side, moved data); a trace stores their index
TRACE_DTYPES: tuple[str, ...] = tuple(n for n, f in FORMATS.items() if f.uses & {"matmul", "vector"})
NUMPY_DTYPES: dict[str, np.dtype] = {name: FORMATS[name].dtype for name in TRACE_DTYPES}
BITS: dict[str, int] = {name: FORMATS[name].bits for name in TRACE_DTYPES}
MATMUL_DTYPES = _with("matmul")  # formats a matmul input is rounded to (quantised)
VECTOR_DTYPES = _with("vector")
SCALE_DTYPES = _with("scale")
#: matmul_format name -> data type, in the table's order
MATMUL_FORMATS: dict[str, str] = {f.user_name: name for name, f in FORMATS.items() if f.user_name}
#: a measurement table's format name -> matmul_format name
TABLE_NAMES: dict[str, str] = {alias: f.user_name for f in FORMATS.values() if f.user_name
                               for alias in (f.user_name, *f.table_names)}


def format_class(dtype: str) -> FormatClass:
    """The tile tables' class of a matmul format: 16bit (fp16, bf16), 8bit (fp8) or 4bit (fp4)."""
    bits = FORMATS[dtype].bits
    return "8bit" if bits == 8 else "4bit" if bits == 4 else "16bit"
