"""A sweep's axes: each swept input, read from the command line and checked, and a config with hardware axes applied.

An axis is a hardware field by its dotted path, a keyword of ``vfasim.run`` (its type hint checks
each value) or a shorthand scale that multiplies every throughput of the pipelines with one role.
A hardware path is deep-merged into the config as data (mappings merge, anything else replaces)
and the result validated whole: a path can add a dtype rate but not skip a check.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass

from pydantic import ValidationError

from vfasim.errors import VfasimError
from vfasim.hw import HardwareConfig
from vfasim.hw.registry import deep_merge, first_error
from vfasim.runner.api import Options, run

SCALES = {"exp_scale": "exp", "vector_scale": "vector", "tensor_scale": "tensor"}
Value = int | float | bool | str | None  # one value of a swept input, as read from the command line

#: run keywords that are no what-if: the axes themselves, options (swept one by one, by name), files a run reads
#: or writes (qkv, trace_out) and its progress bar; a kernel (a name or a YAML file) is swept like any option
_NOT_SWEPT = {"hw", "algo", "options", "return", "qkv", "trace_out", "trace_window", "progress", "option_kwargs"}


@dataclass(frozen=True)
class Axis:
    """One swept input: its column name and its values, in the order given."""

    name: str
    values: tuple

    @property
    def kind(self) -> str:
        if self.name in SCALES:
            return "scale"
        return "hw" if self.name.split(".")[0] in HardwareConfig.model_fields else "run"


def run_keywords() -> dict[str, object]:
    """Keyword -> type hint of every run option a sweep may vary (run's sizes and Options).

    File paths (``qkv``, ``trace_out``) are inputs or outputs of one run, not what-ifs (``_NOT_SWEPT``).
    """
    hints = typing.get_type_hints(run)
    kw = {k: v for k, v in hints.items() if k not in _NOT_SWEPT}
    return {**kw, **typing.get_type_hints(Options)}


def parse_set(text: str) -> Axis:
    """``PATH=V1,V2,…`` -> Axis (``32`` int, ``1e-3`` float, ``true`` bool, ``none``, else text)."""
    path, sep, values = text.partition("=")
    path = path.strip()
    if not sep or not path or not values.strip():
        raise VfasimError(f"--set {text!r}: expected PATH=V1,V2,…")
    hw_fields, run_kw = HardwareConfig.model_fields, run_keywords()
    if path.split(".")[0] not in hw_fields and path not in run_kw and path not in SCALES:
        raise VfasimError(f"unknown sweep path {path!r} (hardware fields: {', '.join(hw_fields)}; "
                          f"run options: {', '.join(run_kw)}; scales: {', '.join(SCALES)})")
    if path in SCALES:
        return scale_axis(path, values)
    axis = Axis(path, tuple(_scalar(v) for v in values.split(",")))
    if axis.kind == "run":
        axis = Axis(path, tuple(_coerce(path, v, run_kw[path]) for v in axis.values))
    return axis


def scale_axis(name: str, text: str) -> Axis:
    """``--exp-scale 0.5,1,2`` -> the ``exp_scale`` axis; factors must be positive numbers."""
    values = tuple(_scalar(v) for v in text.split(","))
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise VfasimError(f"{name}: scale factors must be finite numbers > 0, got {v!r}")
    return Axis(name, values)


def _scalar(text: str) -> Value:
    """A number if it reads as one (int first), true/false, none/null, else the text itself."""
    text = text.strip()
    if not text:
        raise VfasimError("empty value in a sweep list")
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None, "null": None}.get(text.lower(), text)


def _coerce(name: str, value: Value, hint: object) -> Value:
    """``value`` checked against a run keyword's type hint (int, float, bool, str, X | None)."""
    allowed = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
    if value is None and type(None) in allowed:
        return None
    if isinstance(value, bool):
        if bool in allowed:
            return value
    elif isinstance(value, int) and int in allowed:
        return value
    elif isinstance(value, (int, float)) and float in allowed:
        return float(value)
    elif isinstance(value, str) and str in allowed:
        return value
    names = " or ".join(sorted(getattr(t, "__name__", str(t)) for t in allowed))
    raise VfasimError(f"{name}: expected {names}, got {value!r}")


def hw_config(hw: str, base: dict, overrides: dict, scales: dict) -> HardwareConfig:
    """``base`` with dotted-path overrides deep-merged and role throughputs scaled, validated."""
    doc = base
    for path, value in overrides.items():
        doc = deep_merge(doc, _nested(path.split("."), value))
    if scales and isinstance(doc.get("pipelines"), dict):
        doc = {**doc, "pipelines": {n: _scaled(p, scales) for n, p in doc["pipelines"].items()}}
    try:
        return HardwareConfig.model_validate(doc)
    except ValidationError as exc:
        given = ", ".join(f"{k}={v}" for k, v in {**overrides, **scales}.items())
        raise VfasimError(f"hw {hw} with {given}: {first_error(exc)}") from None


def _nested(keys: list[str], value: object) -> dict:
    return {keys[0]: _nested(keys[1:], value) if len(keys) > 1 else value}


def _scaled(pipe: object, scales: dict) -> object:
    """``pipe`` with every throughput multiplied by the scale of its role (``exp_scale`` for exp)."""
    if not isinstance(pipe, dict) or not isinstance(pipe.get("throughput"), dict):
        return pipe  # malformed by an override: validation names it
    factor = math.prod(v for k, v in scales.items() if SCALES[k] == pipe.get("role"))
    return {**pipe, "throughput": {k: v * factor for k, v in pipe["throughput"].items()}}
