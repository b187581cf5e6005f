"""Number formats of the functional engine: matmul inputs and vector-side arithmetic.

Every cast goes through ml_dtypes / NumPy (round to nearest even); nothing is
rounded by hand.

Assumptions:
- Matmul products are exact and accumulated in float32 (BLAS order, not the
  hardware's adder tree: sums may differ from silicon in the last bits).
- Vector-side steps run in NumPy's arithmetic of the vector dtype, rounding
  after every elementwise step.
- Formats that need scaling (fp8, fp4) are not wired in yet: they are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from vfasim.errors import VfasimError

NUMPY_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float4_e2m1": np.dtype(ml_dtypes.float4_e2m1fn),
}
ENGINE_MATMUL_DTYPES = ("float32", "float16", "bfloat16")
ENGINE_VECTOR_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Precision:
    matmul: str = "float16"
    vector: str = "float32"

    def __post_init__(self) -> None:
        if self.matmul not in ENGINE_MATMUL_DTYPES:
            raise VfasimError(f"matmul dtype {self.matmul!r} is not supported by the engine "
                              f"(supported: {', '.join(ENGINE_MATMUL_DTYPES)})")
        if self.vector not in ENGINE_VECTOR_DTYPES:
            raise VfasimError(f"vector dtype {self.vector!r} is not supported by the engine "
                              f"(supported: {', '.join(ENGINE_VECTOR_DTYPES)})")

    @property
    def vector_np(self) -> np.dtype:
        return NUMPY_DTYPES[self.vector]

    def to_matmul(self, x: np.ndarray) -> np.ndarray:
        """Round to the matmul input format; return float32 holding those values."""
        if self.matmul == "float32":
            return x.astype(np.float32, copy=False)
        if self.matmul == "float16":
            return round_float16(x)
        return x.astype(NUMPY_DTYPES[self.matmul]).astype(np.float32)

    def bytes_per(self, which: str) -> int:
        return NUMPY_DTYPES[getattr(self, which)].itemsize


FP16_MIN_NORMAL = np.float32(2.0**-14)
FP16_SUBNORMAL_STEP = 2.0**-24


def round_float16(x: np.ndarray) -> np.ndarray:
    """float32 holding NumPy's float32 -> float16 cast of ``x``, bit for bit.

    NumPy converts results below fp16's normal range on a slow path (~60 ns an
    element, and attention's P is mostly such values), so those are rounded with
    the exact identity rint(x · 2^24) · 2^-24: scaling by a power of two is exact,
    and rint rounds half to even onto fp16's subnormal grid, as the cast does.
    The tests compare this with the plain cast on edge values and random data.
    """
    x = x.astype(np.float32, copy=False)
    small = np.abs(x) < FP16_MIN_NORMAL
    with np.errstate(over="ignore"):
        normal = np.where(small, np.float32(0), x).astype(np.float16).astype(np.float32)
    subnormal = np.rint(x * np.float32(1 / FP16_SUBNORMAL_STEP)) * np.float32(FP16_SUBNORMAL_STEP)
    return np.where(small, subnormal, normal)
