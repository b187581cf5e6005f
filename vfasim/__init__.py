"""vfasim: a cycle-approximate performance model of FlashAttention-style kernels with checked numerics.

``run``, ``RunResult`` and ``to_frame`` load on first use, so that ``import vfasim`` (and ``vfasim --version``)
costs no NumPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.2.0"

if TYPE_CHECKING:
    from vfasim.runner.api import RunResult, run, to_frame

__all__ = ["RunResult", "run", "to_frame", "__version__"]


def __getattr__(name: str) -> object:
    if name not in ("RunResult", "run", "to_frame"):
        raise AttributeError(f"module 'vfasim' has no attribute {name!r}")
    from vfasim.runner import api

    return getattr(api, name)
