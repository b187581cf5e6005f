"""Matmul formats a user may pick on a real chip, and the scaling a real kernel uses with each.

``with_matmul_format(config, name)`` returns the config computing its matmuls in
that format (the vector side stays as the chip has it). A chip supports a format
when one of its tensor pipelines has a rate for it.

Assumptions (the scaling a shipping kernel uses):
- fp16 / bf16: no scaling.
- fp8 (e4m3 / e5m2): FlashAttention-3's FP8 path, one fp32 descale per tensor for
  Q, K and V; P in [0, 1] cast to fp8 unscaled.
- fp4 (e2m1): NVFP4, blocks of 16 elements with an E4M3 scale, on every operand
  (Q, K, V and P), as Blackwell's block-scaled MMA takes it.
"""

from __future__ import annotations

from typing import Literal

from vfasim.errors import VfasimError
from vfasim.hw.config import HardwareConfig, OperandScaling, PrecisionSpec

_NONE = OperandScaling()
_FP8 = OperandScaling(q="per_tensor", k="per_tensor", v="per_tensor", p="none")
_FP4 = OperandScaling(q="per_block", k="per_block", v="per_block", p="per_block")

#: user-facing name -> (matmul data type, operand scaling, block scale rule)
BlockScale = Literal["mxfp4", "nvfp4", "mx"] | None
MATMUL_FORMATS: dict[str, tuple[str, OperandScaling, BlockScale]] = {
    "fp16": ("float16", _NONE, None),
    "bf16": ("bfloat16", _NONE, None),
    "fp8_e4m3": ("float8_e4m3", _FP8, None),
    "fp8_e5m2": ("float8_e5m2", _FP8, None),
    "fp4": ("float4_e2m1", _FP4, "nvfp4"),
}


def supported_formats(config: HardwareConfig) -> list[str]:
    """Format names the config's tensor pipelines have a rate for."""
    rates = set().union(*(p.throughput for p in config.pipelines.values() if p.role == "tensor"))
    return [name for name, (dtype, _, _) in MATMUL_FORMATS.items() if dtype in rates]


def with_matmul_format(config: HardwareConfig, name: str) -> HardwareConfig:
    """``config`` computing its matmuls in format ``name``; a one-line error for a format it lacks."""
    if name not in MATMUL_FORMATS:
        raise VfasimError(f"unknown matmul format {name!r} (valid: {', '.join(MATMUL_FORMATS)})")
    supported = supported_formats(config)
    if name not in supported:
        raise VfasimError(f"{config.name} has no {name} matmul (it supports: {', '.join(supported)})")
    dtype, scaling, block = MATMUL_FORMATS[name]
    precision = PrecisionSpec(matmul=dtype, vector=config.precision.vector, scaling=scaling, block_scale=block)
    return config.model_copy(update={"precision": precision})
