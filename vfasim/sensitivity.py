"""Sensitivity report: which hardware parameter the latency of one trace responds to most.

The SAME trace (work counts, no cycles) is re-simulated on copies of the config
with one parameter changed at a time; the functional engine is not rerun.

Parameters varied (dotted paths into the config):
- ``pipelines.<p>.throughput``: every data type's rate of pipeline ``p`` × factor;
- ``pipelines.<p>.startup_cycles`` and ``.issue_overhead_cycles``: × factor,
  rounded to the nearest integer (halves up) — a factor on 0 changes nothing,
  which the ``baseline``/``value`` columns show;
- ``work_factor.<kind>``: × factor, for kinds in the config's ``work_factor`` and
  for every vector- or exp-class kind (default 1.0);
- ``score_buffers``: +1 and −1 (not multiplied; −1 is left out at 1 buffer).
Only pipelines and op kinds that run ops of the trace are varied (the others
cannot change the latency). A change *improves* the hardware when it raises a
throughput or the buffer count, or lowers cycles or work.

Columns: ``rank`` (1 = most sensitive), ``parameter``, ``factor`` (multiplier,
or the ±1 step for ``score_buffers``), ``baseline`` and ``value`` (scalar
parameters; NaN for throughput, where the factor applies to every rate),
``direction`` (improve/degrade), ``latency_cycles``, ``change_pct`` (vs the
baseline latency, negative = faster). Parameters are ranked by the largest
absolute change of their *improve* rows; ties by name. ``df.attrs`` holds
``baseline_cycles`` and ``schedule``.

Assumptions:
- One parameter at a time (no interactions); first-order, like any one-factor sweep.
- The timing model is monotone in rates, cycles and work, so a degrading change
  never lowers the latency; score_buffers changes the static issue order and is
  not guaranteed monotone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pydantic import ValidationError

from vfasim.errors import VfasimError
from vfasim.hw.config import FUSED, HardwareConfig
from vfasim.hw.registry import first_error
from vfasim.runner.inputs import checked
from vfasim.runner.inputs import factors as check_factors
from vfasim.sim import simulate
from vfasim.trace import KIND_NAMES, OP_KINDS, Trace

COLUMNS = ("rank", "parameter", "factor", "baseline", "value", "direction", "latency_cycles", "change_pct")
CYCLE_FIELDS = ("startup_cycles", "issue_overhead_cycles")


@dataclass(frozen=True)
class Knob:
    """One config parameter: its dotted path, how a factor applies, and its current value."""

    parameter: str
    rule: str  # "rate", "cycles", "work" or "buffers"
    baseline: float  # NaN for "rate": its factor applies to each of ``rates``
    rates: dict[str, float] = field(default_factory=dict)  # "rate": the current rate per data type


def sensitivity(trace: Trace, hw: HardwareConfig, schedule: str = "pipelined",
                factors: Sequence[float] = (2.0, 0.5)) -> pd.DataFrame:
    """Latency of ``trace`` with each parameter of ``hw`` changed in turn, most sensitive first."""
    factors = check_factors(factors)
    base = simulate(trace, hw, schedule).total_cycles
    rows = [_row(trace, hw, schedule, knob, step, base)
            for knob in knobs(trace, hw) for step in _steps(knob, factors)]
    frame = _rank(pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "rank"]))
    frame.attrs.update(baseline_cycles=base, schedule=schedule)
    return frame


def knobs(trace: Trace, hw: HardwareConfig) -> list[Knob]:
    """The parameters worth varying for this trace (see the module notes)."""
    used = {KIND_NAMES[k] for k in np.unique(trace.kind)} - {k for k, p in hw.op_map.items() if p == FUSED}
    out = []
    for name in dict.fromkeys(hw.op_map[k] for k in sorted(used, key=KIND_NAMES.index)):
        spec = hw.pipelines[name]
        out.append(Knob(f"pipelines.{name}.throughput", "rate", math.nan, dict(spec.throughput)))
        out += [Knob(f"pipelines.{name}.{f}", "cycles", getattr(spec, f)) for f in CYCLE_FIELDS]
    varied = [k for k in KIND_NAMES if k in used and (k in hw.work_factor or OP_KINDS[k][0] in ("vector", "exp"))]
    out += [Knob(f"work_factor.{k}", "work", hw.work_factor.get(k, 1.0)) for k in varied]
    out.append(Knob("score_buffers", "buffers", hw.score_buffers))
    return out


def modified(hw: HardwareConfig, knob: Knob, step: float) -> HardwareConfig:
    """A validated copy of ``hw`` with ``knob`` changed by ``step``."""
    doc = hw.model_dump()
    *parents, leaf = knob.parameter.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = {k: v * step for k, v in knob.rates.items()} if knob.rule == "rate" else _value(knob, step)
    try:
        return HardwareConfig.model_validate(doc)
    except ValidationError as exc:
        raise VfasimError(f"{knob.parameter} x{step:g} leaves the accepted range: {first_error(exc)}") from None


def _steps(knob: Knob, factors: Sequence[float]) -> list[float]:
    if knob.rule == "buffers":
        return [s for s in (1.0, -1.0) if knob.baseline + s >= 1]
    return [float(f) for f in dict.fromkeys(factors) if f != 1.0]


def _value(knob: Knob, step: float) -> float:
    """The changed value of a scalar parameter (not "rate")."""
    if knob.rule == "cycles":
        return int(math.floor(knob.baseline * step + 0.5))
    if knob.rule == "buffers":
        return int(knob.baseline + step)
    return knob.baseline * step


def _improves(knob: Knob, step: float) -> bool:
    return step > 1 if knob.rule == "rate" else step > 0 if knob.rule == "buffers" else step < 1


def _row(trace: Trace, hw: HardwareConfig, schedule: str, knob: Knob, step: float, base: int) -> tuple:
    latency = simulate(trace, modified(hw, knob, step), schedule).total_cycles
    scalar = knob.rule != "rate"
    return (knob.parameter, step, float(knob.baseline) if scalar else math.nan,
            float(_value(knob, step)) if scalar else math.nan,
            "improve" if _improves(knob, step) else "degrade", latency,
            100.0 * (latency - base) / base if base else 0.0)


def _rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Order parameters by their largest improving |change|, rows of a parameter together."""
    gain = frame["change_pct"].abs().where(frame["direction"] == "improve", 0.0)
    score = gain.groupby(frame["parameter"]).transform("max")
    order = frame.assign(_score=score, _degrade=frame["direction"] != "improve").sort_values(
        ["_score", "parameter", "_degrade", "factor"], ascending=[False, True, True, False], kind="stable")
    rank = (order["parameter"] != order["parameter"].shift()).cumsum()
    return order.assign(rank=rank)[list(COLUMNS)].reset_index(drop=True)


def format_sensitivity(frame: pd.DataFrame) -> str:
    """A compact text table of ``sensitivity``'s result."""
    head = f"baseline {frame.attrs['baseline_cycles']:,} cycles" if "baseline_cycles" in frame.attrs else ""
    lines = [head] if head else []
    width = max([len("parameter"), *frame["parameter"].map(len)]) + 2
    lines.append(f"{'rank':>4}  {'parameter':<{width}}{'change':>7}{'value':>12}{'latency cycles':>16}{'vs base':>9}")
    for rank, parameter, factor, baseline, value, _, latency, change_pct in frame[list(COLUMNS)].itertuples(
            index=False, name=None):
        change = f"{factor:+g}" if parameter == "score_buffers" else f"x{factor:g}"
        shown = "-" if math.isnan(value) else f"{baseline:g}->{value:g}"
        lines.append(f"{rank:>4}  {parameter:<{width}}{change:>7}{shown:>12}{latency:>16,}{change_pct:>+8.1f}%")
    return "\n".join(lines)


@checked
def sensitivity_table(hw: str | Path | HardwareConfig = "C4V16", algo: str = "vfa", *,
                      schedule: str = "pipelined", factors: tuple[float, ...] = (2.0, 0.5),
                      **run_kwargs: Any) -> pd.DataFrame:
    """``vfasim sensitivity``: one functional run, then its trace re-simulated per hardware parameter.

    ``run_kwargs`` are ``run``'s workload, shape and algorithm-option keywords (its run is planned as ``run``'s,
    ``runner.plan``). One core only: on a config with a chip section it would time one core with every head in
    series, so it is refused; so are the inputs of ``run`` it would not read (``NOT_READ``).
    """
    from vfasim.runner.plan import plan
    from vfasim.runner.prepare import prepare

    factors = check_factors(factors)
    planned = plan({**run_kwargs, "hw": hw, "algo": algo, "schedule": schedule})
    if planned.config.chip is not None:
        raise VfasimError(f"sensitivity re-times one core's trace; {planned.config.name} is a chip (give a core "
                          "config, or compare chip variants with vfasim sweep)")
    for name in NOT_READ:
        if planned.inputs.given(name):
            raise VfasimError(f"{name} does not apply: sensitivity re-times one trace and {NOT_READ[name]}")
    prepared = prepare(planned.timed, planned.inputs)
    return sensitivity(prepared.whole_trace(), prepared.config, schedule, factors)


#: inputs of ``run`` that ``sensitivity_table`` refuses, and why it would not read them
NOT_READ = {"numerics": "checks no numerics", "cache": "computes no references",
            "trace_out": "writes no timeline"}
