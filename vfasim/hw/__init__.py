"""Hardware configs: pydantic schema and the YAML loader.

The names load on first use: ``vfasim.hw.registry.builtin_names`` (``vfasim hw list``) reads the
YAML files without loading pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vfasim.hw.config import FUSED, HardwareConfig, Pipeline
    from vfasim.hw.registry import builtin_names, load_hw

__all__ = ["FUSED", "HardwareConfig", "Pipeline", "builtin_names", "load_hw"]


def __getattr__(name: str) -> object:
    if name in ("FUSED", "HardwareConfig", "Pipeline"):
        from vfasim.hw import config

        return getattr(config, name)
    if name in ("builtin_names", "load_hw"):
        from vfasim.hw import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'vfasim.hw' has no attribute {name!r}")
