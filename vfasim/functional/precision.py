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
        return x.astype(NUMPY_DTYPES[self.matmul]).astype(np.float32)

    def bytes_per(self, which: str) -> int:
        return NUMPY_DTYPES[getattr(self, which)].itemsize
