"""Kernels as data: ``Kernel`` records loaded from ``kernels/*.yaml`` (see ``kernel.model``)."""

from vfasim.kernel.model import DecodeRule, GridSplit, Kernel, PrepassRate, SideLaunch, TileRule, WaveSplit
from vfasim.kernel.registry import builtin_kernel_names, kernels_measured_as, kernels_predicted_only, load_kernel

__all__ = ["DecodeRule", "GridSplit", "Kernel", "PrepassRate", "SideLaunch", "TileRule", "WaveSplit", "builtin_kernel_names", "kernels_measured_as",
           "kernels_predicted_only", "load_kernel"]
