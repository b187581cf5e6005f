"""Hardware configs: pydantic schema and the YAML loader."""

from vfasim.hw.config import FUSED, HardwareConfig, Pipeline
from vfasim.hw.registry import builtin_names, load_hw

__all__ = ["FUSED", "HardwareConfig", "Pipeline", "builtin_names", "load_hw"]
