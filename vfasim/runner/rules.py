"""How one input value is checked and normalised: the rules every entry point shares.

Each rule takes the input's name (for the error) and its value, and returns the value in the type
the model uses, or raises a one-line ``VfasimError`` naming the input.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vfasim.errors import VfasimError


def integer(name: str, value: object, low: int = 1) -> int:
    """``value`` as a Python int >= ``low`` (NumPy integers accepted; bool and float refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise VfasimError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise VfasimError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def scheduler(name: str, value: object) -> object:
    """A Dask scheduler: its address (text) or a client (anything that submits tasks)."""
    if isinstance(value, str) and value.strip() or hasattr(value, "submit"):
        return value
    raise VfasimError(f"{name} must be a Dask scheduler address or a dask.distributed.Client, got {value!r}")


def flag(name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise VfasimError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def number(name: str, value: Any, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite real number in [low, high] as a float."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not ok or not math.isfinite(value) or not low <= value <= high:
        raise VfasimError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise VfasimError(f"{name} must be a name (a string), got {value!r}")
    return value


def path(name: str, value: object) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise VfasimError(f"{name} must be a file path (str or Path), got {value!r}")
    return Path(value)


def window(name: str, value: object) -> tuple[int, int]:
    """A ``(start, end)`` range of cycles, ``0 <= start < end``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise VfasimError(f"{name} must be (start, end) in cycles, got {value!r}")
    start, end = (integer(name, v, 0) for v in value)
    if start >= end:
        raise VfasimError(f"{name} must have start < end, got {value!r}")
    return start, end


def core_list(name: str, value: object) -> tuple[int, ...]:
    """Distinct core numbers (>= 0), at least one; the chip run checks that they exist."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise VfasimError(f"{name} must be a sequence of core numbers, got {value!r}")
    cores = tuple(integer(name, v, 0) for v in value)
    if not cores or len(set(cores)) != len(cores):
        raise VfasimError(f"{name} must name at least one core, each once, got {value!r}")
    return cores


def optional(rule: Callable) -> Callable:
    return lambda name, value: None if value is None else rule(name, value)
