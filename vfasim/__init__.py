"""vfasim: a cycle-approximate performance model of FlashAttention-style kernels with checked numerics."""

__version__ = "0.1.0"

from vfasim.runner.api import RunResult, run  # noqa: E402

__all__ = ["RunResult", "run", "__version__"]
