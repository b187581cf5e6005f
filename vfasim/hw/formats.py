"""Matmul formats a user may pick on a real chip, and the scaling a real kernel uses with each.

``with_matmul_format(config, name)`` returns the config computing its matmuls in
that format (the vector side stays as the chip has it). A chip supports a format
when one of its tensor pipelines has a rate for it. The formats, and the scaling a
shipping kernel uses with each (its assumptions), are rows of ``vfasim.formats``.
"""

from __future__ import annotations

from vfasim import formats
from vfasim.errors import VfasimError
from vfasim.hw.config import HardwareConfig, OperandScaling, PrecisionSpec
from vfasim.hw.registry import variant

BlockScale = formats.BlockScaleName | None
#: user-facing name -> (matmul data type, operand scaling, block scale rule)
MATMUL_FORMATS: dict[str, tuple[str, OperandScaling, BlockScale]] = {
    name: (dtype, OperandScaling.model_validate(dict(fmt.scaling)), fmt.block_scale)
    for name, dtype in formats.MATMUL_FORMATS.items() for fmt in (formats.FORMATS[dtype],)
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
    return variant(config, {"precision": precision.model_dump()}, f"matmul format {name}")
